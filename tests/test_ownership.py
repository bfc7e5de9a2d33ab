"""One owner for each piece of state: no module of the engine or the worker assigns an
attribute of the Engine or the Worker it was handed; it asks the owner's method (``stopped``,
``decode_again``, ``picked``, ``new_state`` ...). Read off the source with ``ast``: a parameter
typed as the engine or the worker (or one of their parts protocols), and a local name bound to
``w.engine``, may not appear as ``x.attr = ...`` or ``x.attr += ...``."""

from __future__ import annotations

import ast
from pathlib import Path

import tui

OWNERS = {"Engine", "EngineParts", "Worker", "WorkerParts", "Backend"}
# Left as it is, with its reason: the surprise map's flag is set on whichever backend drives
# the worker (the remote ones carry it too), so a method would have to be added to each.
KNOWN = {("worker/surprise.py", "score_prompt")}


def _annotation(arg: ast.arg) -> str | None:
    a = arg.annotation
    if isinstance(a, ast.Constant) and isinstance(a.value, str):  # "Engine" as a string
        return a.value
    if isinstance(a, ast.Name):
        return a.id
    if isinstance(a, ast.Attribute):
        return a.attr
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for t in node.targets:
            found.extend(t.elts if isinstance(t, ast.Tuple | ast.List) else [t])
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def handed_writes(source: str) -> list[tuple[int, str]]:
    """(line, attribute) of every write into a handed engine or worker in ``source``."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        handed = {a.arg for a in args if _annotation(a) in OWNERS}
        if not handed:
            continue
        for node in ast.walk(fn):  # eng = w.engine; s, eng = w.state, w.engine
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                t, v = node.targets[0], node.value
                pairs = (
                    zip(t.elts, v.elts, strict=False)
                    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple)
                    else [(t, v)]
                )
                for name, value in pairs:
                    if (
                        isinstance(name, ast.Name)
                        and isinstance(value, ast.Attribute)
                        and value.attr == "engine"
                        and isinstance(value.value, ast.Name)
                        and value.value.id in handed
                    ):
                        handed.add(name.id)
        for node in ast.walk(fn):
            for t in _targets(node):
                if not isinstance(t, ast.Attribute):
                    continue
                base = t.value
                if isinstance(base, ast.Attribute) and base.attr == "engine":
                    base = base.value  # w.engine.x = ...
                if isinstance(base, ast.Name) and base.id in handed:
                    out.append((node.lineno, t.attr))
    return out


def test_the_check_finds_a_write():
    src = "def f(engine: Engine, w: Worker):\n    engine.stop_reason = None\n    w.picks += 1\n"
    src += "def g(w: 'WorkerParts'):\n    s, eng = w.state, w.engine\n    eng.gen_start = 0\n"
    assert handed_writes(src) == [(2, "stop_reason"), (3, "picks"), (6, "gen_start")]


def test_no_module_writes_into_the_engine_or_the_worker_it_was_handed():
    root = Path(tui.__file__).parent
    found = {
        (f"{p.parent.name}/{p.name}", attr, line)
        for sub in ("engine", "worker")
        for p in sorted((root / sub).glob("*.py"))
        for line, attr in handed_writes(p.read_text(encoding="utf-8"))
    }
    assert {(m, a) for m, a, _ in found} <= KNOWN, sorted(found)
