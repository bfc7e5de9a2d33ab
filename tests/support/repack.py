"""llama.cpp system-info lines of CPUs with and without AMX."""

from __future__ import annotations

# llama_print_system_info() as this machine prints it: an AMD EPYC with AVX-512, no AMX.
EPYC_AVX512 = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | "
    "BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)


# A Sapphire Rapids Xeon with llama-cpp-python built there (-march=native): the same list with
# AMX_INT8 where ggml_backend_cpu_get_features puts it, after AVX512_BF16.
XEON_AMX = EPYC_AVX512.replace("AVX512_BF16 = 1 |", "AVX512_BF16 = 1 | AMX_INT8 = 1 |")


# llama-server's start-up line (common_params_get_system_info, at -lv 4).
SERVER_AMX = "system_info: n_threads = 2 (n_threads_batch = 2) / 2 | " + XEON_AMX


SERVER_EPYC = "system_info: n_threads = 1 / 2 | " + EPYC_AVX512
