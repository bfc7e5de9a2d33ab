"""The view caches: one type for every value a view copies out of the engine and can reuse.

A :class:`Memo` keeps one value with the key it was built for. ``key()`` is cheap and says
what the value depends on; when it is unchanged the kept value is returned, otherwise
``build()`` makes a new one. Append-mostly values (the context's pieces, the KV cells) pass
``extend``: given the old key, the old value and the new key it returns the new value from the
old one (looking up only the new tail), or ``None`` when the old value cannot be reused.
``max_age`` (seconds, asked on every call) bounds how long a value may be reused under the
same key: 0 means rebuild every time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    def __init__(
        self,
        key: Callable[[], K],
        build: Callable[[], V],
        *,
        extend: Callable[[K, V, K], V | None] | None = None,
        max_age: Callable[[], float | None] | None = None,
    ) -> None:
        self._key_of = key
        self._build = build
        self._extend = extend
        self._max_age = max_age
        self._kept: tuple[K, V, float] | None = None  # key, value, built at (monotonic)

    def get(self) -> V:
        key = self._key_of()
        now = time.monotonic()
        kept = self._kept
        if kept is not None:
            old_key, old, built_at = kept
            age = self._max_age() if self._max_age is not None else None
            if old_key == key and (age is None or now - built_at < age):
                return old
            if self._extend is not None:
                grown = self._extend(old_key, old, key)
                if grown is not None:
                    self._kept = (key, grown, now)
                    return grown
        value = self._build()
        self._kept = (key, value, now)
        return value

    def clear(self) -> None:
        self._kept = None
