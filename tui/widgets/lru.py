"""A small least-recently-used cache: what a pane keeps between frames, bounded."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    """Up to ``maxsize`` entries; adding one more drops the least recently used."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._d: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        d = self._d
        got = d.get(key)
        if got is not None:
            d.move_to_end(key)
        return got

    def put(self, key: Hashable, value: V) -> V:
        """Keep ``value`` for ``key`` and return it."""
        d = self._d
        d[key] = value
        d.move_to_end(key)
        if len(d) > self.maxsize:
            d.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        self._d.clear()
