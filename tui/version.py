"""``tokenstep --version``: tokenstep's and llama-cpp-python's versions, and llama.cpp's own
system info line (the CPU features its kernels were compiled with), which is what a bug report
about a crash inside llama.cpp needs first. llama_cpp loads only when the flag is given."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn


def version_text() -> str:
    from importlib.metadata import version

    from . import __version__
    from .engine.model import repack
    from .engine.model.model import system_info

    line = system_info()
    return (
        f"tokenstep {__version__} (llama-cpp-python {version('llama_cpp_python')})\n"
        f"llama.cpp: {line}\n"
        f"{repack.decide(line).reason}"
    )


class VersionAction(argparse.Action):
    """argparse's "version" action, with the text built only when the flag is given."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any):
        kw.setdefault("help", "print the versions and llama.cpp's system info, then exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(version_text())
        parser.exit()
