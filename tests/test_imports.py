"""The parts of tokenstep that run without a screen load without textual or rich.

Every module of the engine and the worker (found by walking the package, so a new module is
covered on its own), the command-line arguments and the non-interactive commands is imported in
a fresh interpreter; neither UI library may be in ``sys.modules`` afterwards. The import-linter
contracts check the same statically; this checks what really gets imported at run time."""

from __future__ import annotations

import ast
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import tui

UI_MODULES = ("tui.app", "tui.app_actions", "tui.startup", "tui.widgets", "tui.cli")
UI_LIBRARIES = ("textual", "rich")


def headless_modules() -> list[str]:
    """tui.engine.* and tui.worker.* (if present), tui.args, tui.trace_cli."""
    found = []
    for info in pkgutil.walk_packages(tui.__path__, prefix="tui."):
        name = info.name
        if any(name == ui or name.startswith(ui + ".") for ui in UI_MODULES):
            continue
        if name.startswith(("tui.engine", "tui.worker")) or name in ("tui.args", "tui.trace_cli"):
            found.append(name)
    return sorted(found)


def test_the_walk_finds_the_engine_and_the_arguments():
    mods = headless_modules()
    assert "tui.engine.run.session" in mods and "tui.args" in mods and "tui.trace_cli" in mods
    assert not any(m.startswith("tui.widgets") or m == "tui.app" for m in mods)


def test_headless_modules_do_not_load_textual_or_rich():
    mods = headless_modules()
    code = (
        "import importlib, json, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in {UI_LIBRARIES!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"loaded by {mods}: {loaded[:5]}"


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circles_among_tui_modules():
    """grimp (import-linter's graph) counts imports inside functions and those under
    ``if TYPE_CHECKING:`` too: a module typed with the one that imports it is a circle for a
    reader as much as for the interpreter (a part names the narrow protocol it needs)."""
    grimp = __import__("grimp")
    g = grimp.build_graph("tui", exclude_type_checking_imports=False)
    mods = sorted(m for m in g.modules if m.startswith("tui"))
    edges = {
        m: sorted(x for x in g.find_modules_directly_imported_by(m) if x.startswith("tui"))
        for m in mods
    }
    assert _cycles({"a": ["b"], "b": ["a"], "c": []}) == [["a", "b"]]  # the check can fail
    assert _cycles(edges) == []


def test_no_module_over_400_lines():
    root = __import__("pathlib").Path(tui.__file__).parent
    long = {
        str(p.relative_to(root)): n
        for p in root.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


TESTS = Path(__file__).resolve().parent
# ``from tests.x.y import z`` in code a test runs in a child process
_STRING_IMPORT = re.compile(r"^\s*from (tests(?:\.\w+)+) import ", re.M)


def imports_of_test_modules(source: str) -> list[str]:
    """The test modules and conftests ``source`` imports from, and its relative imports."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.ImportFrom) and n.level:
            found.append("." * n.level + (n.module or ""))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tests."):
            found.append(n.module or "")
        elif isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.startswith("tests.")]
    found += [m.group(1) for m in _STRING_IMPORT.finditer(source)]
    return sorted(
        {
            m
            for m in found
            if m.startswith(".")
            or m.rsplit(".", 1)[-1].startswith("test_")
            or m.endswith("conftest")
        }
    )


def test_the_import_check_finds_a_test_module_and_a_relative_import():
    src = "from tests.app.test_app import x\nfrom .support.app import y\n"
    src += 'from tests.support.app import z\nS = """\nfrom tests.conftest import ROOT\n"""\n'
    assert imports_of_test_modules(src) == [".support.app", "tests.app.test_app", "tests.conftest"]


def test_no_test_module_imports_another_and_helpers_live_in_support():
    """A helper two test files share lives in ``tests/support/``; a test module imports only
    from there (and from tui), so moving or deleting one test file breaks no other."""
    bad = {}
    stray = []
    for p in sorted(TESTS.rglob("*.py")):
        rel = str(p.relative_to(TESTS))
        if found := imports_of_test_modules(p.read_text(encoding="utf-8")):
            bad[rel] = found
        if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py"):
            if p.parent.name != "support":
                stray.append(rel)
    assert bad == {}
    assert stray == [], "helper modules belong in tests/support/"
