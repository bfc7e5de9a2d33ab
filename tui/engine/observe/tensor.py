"""Reading one ggml tensor (a node of the compute graph) from inside the eval callback.

A node arrives as the address of a ``struct ggml_tensor``. Its name and byte count come from
ggml's own functions; its type, shape, strides and sources from the start of the struct,
mirrored by :class:`TensorHeader`; its data from ``ggml_backend_tensor_get`` (the tensor may
live in a backend buffer, not host memory).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..model import ggml

GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64

# ggml_type values of the tensors we read.
_NP_TYPES: dict[int, Any] = {0: np.float32, 1: np.float16, 26: np.int32, 27: np.int64}


class TensorHeader(ctypes.Structure):
    """The start of ``struct ggml_tensor`` (ggml.h, as vendored in llama-cpp-python 0.3.36).

    :func:`check_layout` compares the ``name`` field with ``ggml_get_name`` on a live tensor,
    so a changed layout is caught instead of read as garbage."""

    _fields_ = [
        ("type", ctypes.c_int32),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int32),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
    ]


_lib = ggml.libggml_base()
_tensor_get = _lib.ggml_backend_tensor_get
# The callback's per-node calls, bound once: ``get_name(ptr) -> bytes``, ``nbytes(ptr) -> int``.
get_name = _lib.ggml_get_name
nbytes = _lib.ggml_nbytes


def check_layout(ptr: int) -> bool:
    """True when our :class:`TensorHeader` agrees with ggml about where the name is."""
    hdr = TensorHeader.from_address(ptr)
    return bool(hdr.name == get_name(ptr))


def op_name(ptr: int) -> str:
    """The node's operation as ggml names it (unary ops by their own name, e.g. SILU)."""
    desc = _lib.ggml_op_desc(ptr)
    return desc.decode() if desc else "?"


def src_ptr(ptr: int, i: int) -> int | None:
    """The address of the node's ``i``-th source, or None."""
    return TensorHeader.from_address(ptr).src[i] or None


def read_tensor(ptr: int) -> np.ndarray:
    """Copy a contiguous tensor out of its backend buffer; shape is ggml's ``ne`` reversed
    (so ne = [n_kv, n_tokens, n_head, 1] becomes (1, n_head, n_tokens, n_kv)).

    It runs inside the eval callback, between graph splits, so it keeps to a few calls."""
    hdr = TensorHeader.from_address(ptr)
    dtype = _NP_TYPES.get(hdr.type)
    if dtype is None:
        raise ValueError(f"cannot read ggml type {ggml.type_name(hdr.type)}")
    out = np.empty(hdr.ne[::-1], dtype=dtype)
    # ggml's byte strides nb are those of a C-ordered array of that shape when the tensor is
    # contiguous; ggml_is_contiguous decides the rare other cases (strides of size-1 dims).
    if hdr.nb[::-1] != list(out.strides) and not _lib.ggml_is_contiguous(ptr):
        raise ValueError("cannot read a non-contiguous tensor")
    _tensor_get(ptr, out.__array_interface__["data"][0], 0, out.nbytes)
    return out


def read_last_row(ptr: int) -> np.ndarray | None:
    """Copy only the last row (the last token) of a float32 tensor of ne = [n, n_rows]:
    one ``ggml_backend_tensor_get`` of n floats. None when it has no rows."""
    hdr = TensorHeader.from_address(ptr)
    if hdr.type != 0 or hdr.ne[2] != 1 or hdr.ne[3] != 1 or hdr.nb[0] != 4:
        raise ValueError(f"expected a float32 matrix, not a {ggml.type_name(hdr.type)} tensor")
    n, rows = int(hdr.ne[0]), int(hdr.ne[1])
    if rows < 1:
        return None
    out = np.empty(n, dtype=np.float32)
    _tensor_get(ptr, out.__array_interface__["data"][0], (rows - 1) * int(hdr.nb[1]), out.nbytes)
    return out
