"""llama.cpp's log, captured instead of printed over the terminal.

``llama_log_set`` is process-wide, so one capture serves every model and context. The lines
are kept in a bounded deque; the engine reads them to explain load failures and to check its
own KV arithmetic against what llama.cpp reports.
"""

from __future__ import annotations

import collections
import ctypes
import threading

import llama_cpp

from . import interrupt

# ggml_log_level: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 cont (continues the last line)
LEVEL_NAMES = {0: "none", 1: "debug", 2: "info", 3: "warn", 4: "error", 5: "cont"}
_MAX_LINES = 4000

_lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=_MAX_LINES)
_partial: list[str] = []
_partial_level = [2]
_lock = threading.Lock()
_installed: list[object] = []
_count = [0]  # lines ever logged; positions from mark() count these, not the bounded deque


@interrupt.called_from_c  # a Ctrl-C landing here is recorded, not raised and dropped
def _on_log(level: int, text: bytes | None, _user: ctypes.c_void_p) -> None:
    if not text:
        return
    s = text.decode("utf-8", errors="replace")
    with _lock:
        if level != 5:
            _partial_level[0] = level
        _partial.append(s)
        joined = "".join(_partial)
        if "\n" in joined:
            *done, rest = joined.split("\n")
            for line in done:
                _lines.append((_partial_level[0], line))
                _count[0] += 1
            _partial[:] = [rest] if rest else []


def install() -> None:
    """Route llama.cpp's and ggml's log into this module (idempotent)."""
    if _installed:
        return
    cb = llama_cpp.llama_log_callback(_on_log)
    _installed.append(cb)  # the C side holds only a pointer: keep the callback alive
    llama_cpp.llama_log_set(cb, ctypes.c_void_p(0))


def lines() -> list[tuple[int, str]]:
    with _lock:
        return list(_lines)


def mark() -> int:
    """A position in the log; pass it to :func:`since` to read what came after."""
    with _lock:
        return _count[0]


def _items_since(position: int) -> list[tuple[int, str]]:
    with _lock:
        first = _count[0] - len(_lines)
        return list(_lines)[max(0, position - first) :]


def since(position: int) -> list[str]:
    return [text for _lvl, text in _items_since(position)]


def last_error(position: int = 0) -> str | None:
    """The last error-level line (or a line mentioning an error) logged after ``position``."""
    items = _items_since(position)
    for level, text in reversed(items):
        if level == 4 or "error" in text.lower() or "failed" in text.lower():
            return text.strip()
    return None


def first_error(position: int = 0) -> str | None:
    """The first error-level line logged after ``position``: llama.cpp logs the cause first
    (``error loading model: unknown model architecture``) and generic follow-ups after it."""
    for level, text in _items_since(position):
        if level == 4:
            return text.strip()
    return last_error(position)
