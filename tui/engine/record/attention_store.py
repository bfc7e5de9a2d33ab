"""Attention weights of older decodes, moved out of memory into a temporary file.

Each step's weights for a layer are (n_head, 1, n_keys): summed over a session, memory grows
with the square of the tokens (measured: 286 MB at 500 tokens, 409 MB at 2,000 with one layer).
The capture keeps the newest decodes' arrays in memory and hands older ones to a
:class:`WeightStore`: written once to an unnamed temporary file, and read back a row at a
time with ``os.pread`` when the Attention pane draws that row. The records' ``extras`` and the
capture's row sources then hold a :class:`StoredArray` in place of the array; ``np.asarray``
reads the whole array back (for a trace line or a test), so nothing is lost.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np


class WeightStore:
    """An append-only temporary file of arrays; the file is unnamed, so it goes with the
    process."""

    def __init__(self) -> None:
        self._fh = tempfile.TemporaryFile()
        self._end = 0

    def _write(self, data: bytes) -> int:
        at = self._end
        os.pwrite(self._fh.fileno(), data, at)
        self._end += len(data)
        return at

    def put(self, w: np.ndarray) -> StoredArray:
        """Store one decode's weights (n_head, n_rows, n_keys), row-major by query row, so a
        row's weights for every head are one read."""
        rows = np.ascontiguousarray(np.moveaxis(np.asarray(w, dtype=np.float32), 1, 0))
        return StoredArray(self, self._write(rows.tobytes()), tuple(w.shape))

    def put_ints(self, values: list[int]) -> StoredInts:
        arr = np.asarray(values, dtype=np.int64)
        return StoredInts(self, self._write(arr.tobytes()), len(values))

    def read(self, offset: int, n_bytes: int) -> bytes:
        data = os.pread(self._fh.fileno(), n_bytes, offset)
        if len(data) != n_bytes:
            raise OSError(f"the attention weight file ended early ({len(data)} of {n_bytes})")
        return data

    @property
    def bytes_stored(self) -> int:
        return self._end


class StoredArray:
    """One decode's weights for one layer, on disk; ``shape`` is the array's own
    (n_head, n_rows, n_keys)."""

    __slots__ = ("store", "offset", "shape")

    def __init__(self, store: WeightStore, offset: int, shape: tuple[int, ...]) -> None:
        self.store, self.offset, self.shape = store, offset, shape

    def row(self, r: int) -> np.ndarray:
        """Query row ``r`` for every head: (n_head, n_keys), float32."""
        n_head, _, n_keys = self.shape
        size = n_head * n_keys * 4
        data = self.store.read(self.offset + r * size, size)
        return np.frombuffer(data, dtype=np.float32).reshape(n_head, n_keys)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        n_head, n_rows, n_keys = self.shape
        data = self.store.read(self.offset, n_head * n_rows * n_keys * 4)
        rows = np.frombuffer(data, dtype=np.float32).reshape(n_rows, n_head, n_keys)
        out = np.moveaxis(rows, 0, 1)
        return out.astype(dtype) if dtype is not None else out

    def __getitem__(self, index: Any) -> np.ndarray:
        return np.asarray(self)[index]  # type: ignore[no-any-return]


class StoredInts:
    """A list of ints (a decode's key positions, cells or kv_ids), on disk; compares equal to
    the list it was made from."""

    __slots__ = ("store", "offset", "n")

    def __init__(self, store: WeightStore, offset: int, n: int) -> None:
        self.store, self.offset, self.n = store, offset, n

    def tolist(self) -> list[int]:
        data = self.store.read(self.offset, self.n * 8)
        return np.frombuffer(data, dtype=np.int64).tolist()  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    def __getitem__(self, index: Any) -> Any:
        return self.tolist()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredInts):
            other = other.tolist()
        return isinstance(other, list) and self.tolist() == other

    __hash__ = None  # type: ignore[assignment]


def is_stored(value: Any) -> bool:
    return isinstance(value, StoredArray | StoredInts)
