"""The parts of tokenstep that run without a screen load without textual or rich.

Every module of the engine and the worker (found by walking the package, so a new module is
covered on its own), the command-line arguments and the non-interactive commands is imported in
a fresh interpreter; neither UI library may be in ``sys.modules`` afterwards. The import-linter
contracts check the same statically; this checks what really gets imported at run time."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import tui

UI_MODULES = ("tui.app", "tui.app_actions", "tui.startup", "tui.widgets", "tui.cli")
UI_LIBRARIES = ("textual", "rich")


def headless_modules() -> list[str]:
    """tui.engine.* and tui.worker.* (if present), tui.args, tui.commands."""
    found = []
    for info in pkgutil.walk_packages(tui.__path__, prefix="tui."):
        name = info.name
        if any(name == ui or name.startswith(ui + ".") for ui in UI_MODULES):
            continue
        if name.startswith(("tui.engine", "tui.worker")) or name in ("tui.args", "tui.commands"):
            found.append(name)
    return sorted(found)


def test_the_walk_finds_the_engine_and_the_arguments():
    mods = headless_modules()
    assert "tui.engine.session" in mods and "tui.args" in mods and "tui.commands" in mods
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
