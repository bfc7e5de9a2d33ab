"""Wrapping that counts terminal cells: a CJK character takes two, and Chinese text has no
spaces to break at.

Text is cut into units: a run of Latin letters (a word, never split unless it is wider than
the line), a space, or one wide character (a line may end after any of them). Closing
punctuation such as ，。） sticks to the unit before it, so no line starts with it.
"""

from __future__ import annotations

import re

from rich.cells import cell_len

CLOSING = set("，。、；：！？）」』》〉”’,.;:!?)]}%")
_UNITS = re.compile(
    r"\s|[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f]|[^\s\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f]+"
)


def units(text: str) -> list[str]:
    out: list[str] = []
    for u in _UNITS.findall(text):
        if out and u[0] in CLOSING and not out[-1].isspace():
            out[-1] += u  # no line begins with closing punctuation
        else:
            out.append(u)
    return out


def _split_wide(word: str, width: int) -> list[str]:
    """A unit wider than the line, cut at cell boundaries."""
    parts, cur = [], ""
    for ch in word:
        if cur and cell_len(cur + ch) > width:
            parts.append(cur)
            cur = ""
        cur += ch
    return [*parts, cur] if cur else parts


def wrap_line(line: str, width: int) -> list[str]:
    """One paragraph (no newline) as lines of at most ``width`` cells; an indented row keeps
    its indent on every line it wraps to."""
    width = max(width, 2)
    indent = len(line) - len(line.lstrip(" "))
    if indent * 2 > width:
        indent = 0
    lines: list[str] = []
    cur = line[:indent]
    pad = " " * indent
    for u in units(line[indent:]):
        if cell_len(cur + u) <= width:
            cur += u
            continue
        if u.isspace():
            lines.append(cur.rstrip())
            cur = pad
            continue
        if cur.strip():
            lines.append(cur.rstrip())
            cur = pad
        room = width - indent
        parts = _split_wide(u, room) if cell_len(u) > room else [u]
        lines.extend(pad + piece for piece in parts[:-1])
        cur = pad + parts[-1]
    if cur.strip() or not lines:
        lines.append(cur.rstrip())
    return lines


def wrap(text: str, width: int) -> list[str]:
    """Every paragraph of ``text`` wrapped to ``width`` cells."""
    return [out for line in text.split("\n") for out in wrap_line(line, width)]


def pack(items: list[str], width: int, sep: str = "  ") -> list[str]:
    """Short items (the seven stage names) on as few lines as fit, never one cut in two."""
    lines: list[str] = []
    cur = ""
    for item in items:
        trial = f"{cur}{sep}{item}" if cur else item
        if cur and cell_len(trial) > width:
            lines.append(cur)
            cur = item
        else:
            cur = trial
    return [*lines, cur] if cur else lines
