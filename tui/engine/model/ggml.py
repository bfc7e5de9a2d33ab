"""The few ggml facts the engine needs, read from ggml itself.

Type sizes come from ``ggml_type_size``/``ggml_blck_size`` in llama.cpp's own
``libggml-base`` so that byte counts are ggml's arithmetic, not a table we typed in.
"""

from __future__ import annotations

import ctypes
import functools
import pathlib

# ggml_type enum values (ggml.h); names as llama.cpp's -ctk/-ctv accept them.
GGML_TYPES: dict[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "bf16": 30,
}
GGML_TYPE_NAMES: dict[int, str] = {v: k for k, v in GGML_TYPES.items()}


@functools.cache
def libggml_base() -> ctypes.CDLL:
    """Load ``libggml-base`` from the folder llama-cpp-python ships its libraries in."""
    import llama_cpp

    libdir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        path = libdir / name
        if path.exists():
            lib = ctypes.CDLL(str(path))
            break
    else:  # pragma: no cover - depends on the wheel layout
        raise OSError(f"libggml-base was not found in {libdir}")
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    # What the graph tap reads of a node (tui.engine.observe.tensor).
    lib.ggml_op_name.argtypes = [ctypes.c_int]
    lib.ggml_op_name.restype = ctypes.c_char_p
    lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
    lib.ggml_op_desc.restype = ctypes.c_char_p
    lib.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
    lib.ggml_is_contiguous.restype = ctypes.c_bool
    lib.ggml_backend_tensor_get.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
    ]
    lib.ggml_backend_tensor_get.restype = None
    return lib


def row_size(ggml_type: int, n_elements: int) -> int:
    """Bytes that ``n_elements`` values of ``ggml_type`` take (ggml's own ``ggml_row_size``)."""
    lib = libggml_base()
    blck = int(lib.ggml_blck_size(ggml_type))
    return int(lib.ggml_type_size(ggml_type)) * n_elements // blck


def type_name(ggml_type: int) -> str:
    name = libggml_base().ggml_type_name(ggml_type)
    return name.decode() if name else f"type{ggml_type}"


def parse_cache_type(name: str) -> int:
    """Map a ``-ctk``/``-ctv`` value such as ``q8_0`` to its ggml type id."""
    from .errors import TokenstepError

    key = name.strip().lower()
    if key not in GGML_TYPES:
        choices = ", ".join(GGML_TYPES)
        raise TokenstepError(f"unknown cache type {name!r}; choose one of {choices}.")
    return GGML_TYPES[key]
