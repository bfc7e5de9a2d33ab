"""Which family of llama.cpp CPU kernels this build runs, for snapshots that show the model's
own numbers.

A picture of the real model after a greedy reply holds probabilities to three decimals. They
are llama.cpp's figures, but not the same on every CPU: the Q4_1 x Q8_1 dot products sum their
blocks in an order set by the SIMD width the build was compiled for, the next layer's
activations are quantized to Q8_1 from those sums, and a difference in the last bit can move
an activation by a whole quantization step, which 30 layers carry on to the logits. Pictures
made on an AVX-512 build differed on an AVX2-only one in the probabilities they print. So each kernel
family keeps its own picture, named by what ``llama_print_system_info()`` reports, never by
the CPU's name; a family without one skips with the command that makes it."""

from __future__ import annotations

import re

import pytest

from tui.engine.model.model import system_info

# From the widest to the narrowest: the first one the build reports names its family.
_FAMILIES = (
    ("AMX_INT8", "amx"),
    ("AVX512", "avx512"),
    ("AVX2", "avx2"),
    ("NEON", "neon"),
)


def kernel_class(info: str | None = None) -> str:
    """The family of CPU kernels in ``info`` (``llama_print_system_info()``'s text)."""
    text = system_info() if info is None else info
    on = {m.group(1) for m in re.finditer(r"(\w+) = 1", text)}
    return next((name for feature, name in _FAMILIES if feature in on), "generic")


# Every family is a parameter, so a picture made for another family belongs to a test that
# is skipped here, not to no test at all. The snapshot plugin (syrupy, one file per picture)
# still reports those pictures "unused", and a whole file's `--snapshot-update` DELETES them
# (seen: the avx2 pictures of test_run_chart_snapshots, on an avx512 build): update by node id,
# `pytest 'tests/test_x.py::test_y[avx512]' --snapshot-update`, as need_picture says.
def _family(name: str) -> object:
    here = kernel_class()
    skip = pytest.mark.skipif(
        name != here, reason=f"a picture for {name} kernels; this build runs {here} kernels"
    )
    return pytest.param(name, marks=skip)


per_kernels = pytest.mark.parametrize(
    "kernels", [_family(n) for n in (*(n for _, n in _FAMILIES), "generic")]
)


def need_picture(request: pytest.FixtureRequest, snapshot_dir: str, kernels: str) -> None:
    """Skip, saying how to make one, when this build's kernel family (``kernels``, the
    parameter :data:`per_kernels` left running: it skips every other family) has no picture
    yet."""
    from pathlib import Path

    if request.config.getoption("--snapshot-update", default=False):
        return
    name = f"{request.node.name}.svg"
    folder = Path(request.fspath).parent / "__snapshots__" / snapshot_dir
    if not (folder / name).exists():
        pytest.skip(
            f"no picture of {name} for {kernels} kernels; "
            f"`pytest {request.node.nodeid} --snapshot-update` on such a machine makes one"
        )
