"""The README's Architecture is the map: every module of the engine and the worker is named
in it (a new module is found by walking the packages), and its layers are the contract's."""

from __future__ import annotations

import pkgutil
import re
import tomllib
from pathlib import Path

import tui.engine
import tui.worker

ROOT = Path(__file__).resolve().parent.parent


def architecture() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Architecture\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_every_engine_and_worker_module_is_named_in_the_architecture():
    arch = architecture()
    named = set(re.findall(r"`([a-z_]+)(?:\.[A-Za-z_]+)?`", arch))  # `stepping`, `session.Engine`
    missing = {
        f"{pkg.__name__}.{info.name}"
        for pkg in (tui.engine, tui.worker)
        for info in pkgutil.walk_packages(pkg.__path__)
        if not info.ispkg and info.name.rpartition(".")[2] not in named
    }
    assert "session" in named and "key_lane" in named  # the check reads the section
    assert missing == set()


def test_the_architecture_lists_the_contracts_layers_in_order():
    arch = architecture()
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = conf["tool"]["importlinter"]["contracts"][0]["layers"]
    rows = [line for line in arch.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(layers)
    for row, layer in zip(rows, layers, strict=True):
        for mod in re.split(r"[|:]", layer):
            path = mod.strip().replace(".", "/")
            assert f"`{path}.py`" in row or f"`{path}/`" in row, (row, mod)
