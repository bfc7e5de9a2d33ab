"""The snapshot family is read from what llama.cpp reports, on text from other machines' builds
too (the reports below are llama_print_system_info() lines of the shape llama.cpp prints)."""

from __future__ import annotations

import pytest

from tests.support.kernel_class import kernel_class

AVX2_ONLY = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)
AVX512 = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)
AMX = AVX512.replace("REPACK = 1 |", "AMX_INT8 = 1 | REPACK = 1 |")
NEON = "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | LLAMAFILE = 1 | REPACK = 1 |"


@pytest.mark.parametrize(
    ("info", "family"),
    [
        (AVX2_ONLY, "avx2"),
        (AVX512, "avx512"),
        (AMX, "amx"),
        (NEON, "neon"),
        ("CPU : SSE3 = 1 | LLAMAFILE = 1 |", "generic"),
        (AVX2_ONLY.replace("AVX2 = 1", "AVX2 = 0"), "generic"),
    ],
)
def test_the_family_is_the_widest_kernel_the_build_reports(info, family):
    assert kernel_class(info) == family
