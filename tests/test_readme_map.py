"""The README's Architecture is the map: every module of ``tui`` is named in it, in the
section of its package (and an engine module in the bullet of its room); a new module is found
by walking the packages. Its layers are the contract's."""

from __future__ import annotations

import pkgutil
import re
import tomllib
from pathlib import Path

import tui

ROOT = Path(__file__).resolve().parent.parent


def architecture() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Architecture\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def section(text: str, pkg: str) -> str:
    """The ``###`` section whose heading names the package's folder (```tui/engine/```)."""
    folder = "`" + pkg.replace(".", "/") + "/`"
    heads = [m for m in re.finditer(r"^### .*$", text, re.M) if folder in m.group(0)]
    assert len(heads) == 1, f"no section (or several) whose heading names {folder}"
    end = text.find("\n###", heads[0].end())
    return text[heads[0].start() :] if end < 0 else text[heads[0].start() : end]


def bullet(text: str, head: str) -> str:
    """The bullet of a section that starts with ``head``, up to the next bullet."""
    start = text.index(f"\n- **{head}")
    end = text.find("\n- ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)(?:\.[A-Za-z_]+)?`", text))  # `stepping`, `session.Engine`


def modules() -> dict[str, list[str]]:
    """package -> the names of its modules (a package's with a slash), every package of tui."""
    found: dict[str, list[str]] = {"tui": []}
    for info in pkgutil.walk_packages(tui.__path__, prefix="tui."):
        pkg, _, name = info.name.rpartition(".")
        if info.ispkg:
            found.setdefault(info.name, [])
        found.setdefault(pkg, []).append(name + ("/" if info.ispkg else ""))
    return found


def test_every_module_of_tui_is_named_in_the_section_of_its_package():
    arch = architecture()
    engine = section(arch, "tui.engine")
    missing = set()
    for pkg, names in modules().items():
        if pkg.startswith("tui.engine."):  # a room of the engine: its own bullet
            text = bullet(engine, f"`{pkg.rpartition('.')[2]}/`")
        else:  # tui and each of its packages: a section of its own
            text = section(arch, pkg)
        seen = named(text)
        for name in names:
            if pkg == "tui" and name.endswith("/"):
                continue  # a package of tui: its own section, checked in its turn
            found = f"`{name}`" in text if name.endswith("/") else name in seen
            if not found:
                missing.add(f"{pkg}.{name}")
    assert "session" in named(engine) and "key_lane" in named(arch)  # the check reads the map
    assert {"tui.engine.model", "tui.widgets", "tui.tour"} <= set(modules())
    assert missing == set()


def test_every_module_of_the_engine_stands_in_a_room():
    """Nothing but ``__init__`` at the top of ``tui/engine/``: each module is in a folder, so
    the map's bullet of that room names it (the test above)."""
    engine = modules()["tui.engine"]
    assert {"run/", "record/", "model/"} <= set(engine)
    assert [n for n in engine if not n.endswith("/")] == []


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
