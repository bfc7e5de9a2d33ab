"""A small, defensive reader for the GGUF header.

It reads the metadata key/values and the tensor table without loading any weights, so
``tokenstep info`` works on models far too large to load, and a broken or truncated file is
reported in one sentence before llama.cpp ever sees it. Every length in the file is checked
against the file size first: a hostile file cannot make us allocate gigabytes.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp

from .errors import ModelError

GGUF_MAGIC = b"GGUF"
GGML_MAX_DIMS = 4  # ggml.h; llama.cpp's gguf reader refuses tensors with more dimensions
# llama-hparams.h. llama.cpp *aborts the process* (GGML_ASSERT) on a block_count outside
# 1..LLAMA_MAX_LAYERS, so a file that claims one is refused here, before llama.cpp reads it.
LLAMA_MAX_LAYERS = 512
_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRUCT = {fmt: struct.Struct(fmt) for fmt in {*_SCALARS.values(), "<I", "<Q"}}
_STRING, _ARRAY = 8, 9
# Arrays longer than this are skipped, not kept (the vocabulary, merges, scores).
_KEEP_ARRAY_MAX = 4096


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass
class GGUFHeader:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    def arch_get(self, suffix: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.arch}.{suffix}", default)


class _Reader:
    """Reads forward through the header in a memory map of the file, keeping its own position
    (the vocabulary alone is ~100,000 small reads: file calls would cost ~0.1 s)."""

    def __init__(self, buf: mmap.mmap, size: int, path: Path, pos: int = 0) -> None:
        self.buf, self.size, self.path, self.pos = buf, size, path, pos

    def _fail(self, what: str) -> ModelError:
        return ModelError(f"{self.path} is not a valid GGUF file: {what}.")

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise self._fail("it ends in the middle of its header (truncated or corrupt)")
        self.pos += n
        return self.buf[self.pos - n : self.pos]

    def scalar(self, fmt: str) -> Any:
        s = _STRUCT[fmt]
        return s.unpack(self.read(s.size))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str, hdr: GGUFHeader, *, nested: bool = False) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY and not nested:  # llama.cpp refuses arrays of arrays too
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if count > self.size:  # each element takes at least one byte
                raise self._fail(f"array {key!r} claims {count} elements")
            hdr.array_lengths[key] = count
            if etype in _SCALARS and count > _KEEP_ARRAY_MAX:
                self.read(struct.calcsize(_SCALARS[etype]) * count)
                return None
            if etype == _STRING and count > _KEEP_ARRAY_MAX:
                buf, pos, size, length = self.buf, self.pos, self.size, _STRUCT["<Q"].unpack_from
                for _ in range(count):
                    if pos + 8 > size:
                        break
                    pos += 8 + length(buf, pos)[0]
                if pos > size:
                    raise self._fail("it ends in the middle of its header (truncated or corrupt)")
                self.pos = pos
                return None
            return [self.value(etype, key, hdr, nested=True) for _ in range(count)]
        raise self._fail(f"unknown value type {vtype} for key {key!r}")


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor table; raise :class:`ModelError` on any defect."""
    p = Path(path)
    check_model_path(p)
    try:
        return _parse(p)
    except OSError as exc:  # e.g. permission denied, or an I/O error half-way
        raise ModelError(f"cannot read model file {p}: {exc.strerror or exc}.") from exc


def _parse(p: Path) -> GGUFHeader:
    with p.open("rb") as f:
        if f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ModelError(f"{p} is not a GGUF file (it does not start with the bytes 'GGUF').")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse_rest(_Reader(buf, len(buf), p, pos=len(GGUF_MAGIC)))


def _parse_rest(r: _Reader) -> GGUFHeader:
    p, size = r.path, r.size
    version = r.scalar("<I")
    if version not in (2, 3):
        raise r._fail(f"unsupported GGUF version {version}")
    n_tensors = r.scalar("<Q")
    n_kv = r.scalar("<Q")
    if n_tensors > size or n_kv > size:
        raise r._fail("its counts of tensors or keys are impossible")
    hdr = GGUFHeader(path=p, version=version, file_size=size)
    for _ in range(n_kv):
        key = r.string()
        if key in hdr.metadata:
            raise r._fail(f"the key {key!r} appears twice")
        vtype = r.scalar("<I")
        hdr.metadata[key] = r.value(vtype, key, hdr)
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.scalar("<I")
        if n_dims > GGML_MAX_DIMS:
            raise r._fail(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(r.scalar("<Q") for _ in range(n_dims))
        ggml_type = r.scalar("<I")
        _check_tensor_type(r, name, shape, ggml_type)
        offset = r.scalar("<Q")
        hdr.tensors.append(TensorInfo(name, shape, ggml_type, offset))
    align = hdr.metadata.get("general.alignment", 32)
    if type(align) is not int or align <= 0 or align & (align - 1):
        raise r._fail(f"its alignment {align!r} is not a power of two")
    pos = r.pos
    hdr.data_offset = pos + (-pos) % align
    return hdr


def _check_tensor_type(r: _Reader, name: str, shape: tuple[int, ...], ggml_type: int) -> None:
    """The checks llama.cpp's gguf reader makes, done before any ggml call sees the type:
    ggml indexes a table with it, so an id out of range must never reach ggml."""
    from .ggml import libggml_base

    if not 0 <= ggml_type < llama_cpp.GGML_TYPE_COUNT:
        raise r._fail(f"tensor {name!r} has the unknown ggml type {ggml_type}")
    blck = int(libggml_base().ggml_blck_size(ggml_type))
    if blck <= 0:
        raise r._fail(f"tensor {name!r} uses the removed ggml type {ggml_type}")
    if shape and shape[0] % blck:
        raise r._fail(f"tensor {name!r} has rows that do not fill whole blocks of its type")
    n = 1
    for d in shape:
        n *= d
    if n >= 2**63:
        raise r._fail(f"tensor {name!r} has an impossible shape {shape}")


def tensor_data_end(hdr: GGUFHeader) -> int:
    """The file offset where the last tensor's data ends, using ggml's own type sizes."""
    from .ggml import row_size

    end = hdr.data_offset
    for t in hdr.tensors:
        n = 1
        for d in t.shape:
            n *= d
        end = max(end, hdr.data_offset + t.offset + row_size(t.ggml_type, n))
    return end


def check_model_path(p: Path) -> None:
    """One clear sentence for a path that cannot be a model file at all."""
    try:
        st = p.stat()
    except FileNotFoundError as exc:
        raise ModelError(f"model file not found: {p}.") from exc
    except (OSError, ValueError) as exc:  # name too long, a loop of links, a NUL byte...
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelError(f"cannot open model file {p}: {why}.") from exc
    if stat.S_ISDIR(st.st_mode):
        raise ModelError(f"{p} is a directory, not a GGUF model file.")
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
        raise ModelError(f"{p} is not a regular file, so it cannot be a GGUF model.")
    if not os.access(p, os.R_OK):
        raise ModelError(f"cannot read model file {p} (permission denied).")


def validate(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read the header and check that the tensor data is all there (not truncated)."""
    hdr = read_header(path)
    n_layer = hdr.arch_get("block_count")
    if n_layer is not None and (type(n_layer) is not int or not 0 < n_layer <= LLAMA_MAX_LAYERS):
        raise ModelError(
            f"{hdr.path} claims {n_layer!r} layers; llama.cpp supports 1 to {LLAMA_MAX_LAYERS}."
        )
    check_hparams(hdr)
    end = tensor_data_end(hdr)
    if end > hdr.file_size:
        raise ModelError(
            f"{hdr.path} is truncated: its tensors need {end:,} bytes but the file has "
            f"{hdr.file_size:,}."
        )
    return hdr


def check_hparams(hdr: GGUFHeader) -> None:
    """Refuse numeric hyperparameters on which llama.cpp would abort the whole process.

    llama.cpp reads these values without checking them and asserts later, in the middle of the
    first ``llama_decode`` (``ops.cpp: GGML_ASSERT(eps >= 0.0f)`` for a NaN norm epsilon), or
    while loading (``GGML_ASSERT(hparams.n_expert_used <= hparams.n_expert)``). An abort takes
    the terminal with it, so each is one sentence here, before llama.cpp sees the file."""
    prefix = f"{hdr.arch}."
    for key, value in hdr.metadata.items():
        if not key.startswith(prefix):
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise ModelError(f"{hdr.path} has {key} = {v}, which is not a finite number.")
        if key.endswith("epsilon") and any(isinstance(v, float) and v < 0 for v in values):
            raise ModelError(f"{hdr.path} has a negative {key}; a norm's epsilon must be >= 0.")
        if key.endswith("rope.freq_base") and any(
            isinstance(v, (int, float)) and v <= 0 for v in values
        ):
            raise ModelError(f"{hdr.path} has {key} = {value}; a rope base must be positive.")
    n_expert = hdr.arch_get("expert_count", 0)
    n_used = hdr.arch_get("expert_used_count", 0)
    if isinstance(n_expert, int) and isinstance(n_used, int):
        if n_used > n_expert or (n_expert > 0 and n_used < 1):
            raise ModelError(
                f"{hdr.path} uses {n_used} of {n_expert} experts per token; "
                "llama.cpp needs 1 to expert_count."
            )
