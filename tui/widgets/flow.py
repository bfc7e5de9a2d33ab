"""Flowing many small pieces (token chips, text pieces) into lines, incrementally.

A pane that re-wrapped the whole context for every frame would cost O(n) per frame, and a reply
adds a token many times a second. :class:`FlowLines` keeps the wrapped lines; when the sequence
of atoms changes only from index ``k`` on (a token appended, a rewind, the newest chip's marker
moving), it re-wraps from the line that holds atom ``k`` and keeps every line before it.
:class:`FlowPane` draws the lines with ``render_line``, so a frame only builds the visible rows.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from rich.segment import Segment

from .common import LinePane


@dataclass(frozen=True)
class Atom:
    """A run of styled cells that wraps as one unit (split only if wider than a line)."""

    segments: tuple[Segment, ...]
    width: int
    brk: bool = False  # a line break follows it
    trim: bool = False  # drop its leading spaces when it starts a wrapped line (a word)


class FlowLines:
    """Greedy line wrapping of atoms, kept up to date from the first changed atom on."""

    def __init__(self) -> None:
        self.width = 0
        self.atoms: list[Atom] = []
        self.lines: list[list[Segment]] = []
        self.first_atom: list[int] = []  # the atom each line starts with (or continues)
        self.soft: list[bool] = []  # the line began because the one before was full

    def update(self, atoms: list[Atom], changed_from: int, width: int) -> None:
        """``atoms`` equals the previous list before index ``changed_from``."""
        width = max(width, 1)
        if width != self.width:
            self.width, changed_from = width, 0
        changed_from = max(0, min(changed_from, len(self.atoms), len(atoms)))
        # A changed atom may now fit at the end of the line before it: re-wrap from the line
        # that holds the last unchanged atom.
        target = max(changed_from - 1, 0)
        line = bisect_left(self.first_atom, target)
        if line == len(self.first_atom) or self.first_atom[line] != target:
            line -= 1  # the atom starts inside the line before
        soft = False
        if line < 0:
            line, start = 0, 0
        else:
            start = self.first_atom[line]
            line = bisect_left(self.first_atom, start)  # the first line of that atom
            soft = self.soft[line]
        del self.lines[line:]
        del self.first_atom[line:]
        del self.soft[line:]
        self.atoms = atoms
        self._wrap(start, soft)

    def _emit(self, line: list[Segment], first: int, soft: bool) -> None:
        self.lines.append(line)
        self.first_atom.append(first)
        self.soft.append(soft)

    def _wrap(self, start: int, soft: bool) -> None:
        width = self.width
        cur: list[Segment] = []
        cur_w, cur_first, cur_soft = 0, start, soft
        for i in range(start, len(self.atoms)):
            a = self.atoms[i]
            wrapped = i == start and soft
            if cur and cur_w + a.width > width:
                self._emit(cur, cur_first, cur_soft)
                cur, cur_w, cur_soft, wrapped = [], 0, True, True
            if wrapped and a.trim:
                a = _lstrip(a)
            if not cur:
                cur_first = i
            if a.width > width:  # a very wide atom: cut it into full lines
                rest, rest_w = list(a.segments), a.width
                while rest and rest_w > width:
                    head, rest = _split(rest, width)
                    if not head:  # a double-width character on a one-cell line
                        head, rest = rest[:1], rest[1:]
                    rest_w -= sum(seg.cell_length for seg in head)
                    self._emit(head, i, cur_soft)
                    cur_soft = True
                cur, cur_w, cur_first = rest, rest_w, i
            else:
                cur.extend(a.segments)
                cur_w += a.width
            if a.brk:
                self._emit(cur, cur_first, cur_soft)
                cur, cur_w, cur_first, cur_soft = [], 0, i + 1, False
        if cur:
            self._emit(cur, cur_first, cur_soft)


def _lstrip(a: Atom) -> Atom:
    """The atom without its leading spaces (a word that wrapped to a new line)."""
    segs = list(a.segments)
    while segs and not segs[0].text.strip(" "):
        segs.pop(0)
    if segs:
        first = segs[0]
        segs[0] = Segment(first.text.lstrip(" "), first.style, first.control)
    width = sum(seg.cell_length for seg in segs)
    return Atom(tuple(segs), width, a.brk, a.trim)


def _split(segments: list[Segment], cells: int) -> tuple[list[Segment], list[Segment]]:
    """The first ``cells`` cells of ``segments`` and the rest."""
    head: list[Segment] = []
    used = 0
    for k, seg in enumerate(segments):
        n = seg.cell_length
        if used + n <= cells:
            head.append(seg)
            used += n
            continue
        a, b = seg.split_cells(cells - used)
        if a.text:
            head.append(a)
        return head, ([b] if b.text else []) + list(segments[k + 1 :])
    return head, []


def changed_from(old: tuple[object, ...], new: tuple[object, ...]) -> int:
    """The first index where two sequences differ (the shorter length if one extends the
    other). Compares whole slices in C; falls back to halving only when they differ."""
    n = min(len(old), len(new))
    if old[:n] == new[:n]:
        return n
    lo, hi = 0, n  # old[:lo] == new[:lo], old[:hi] != new[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class FlowPane(LinePane):
    """A scrolling pane whose rows come from a :class:`FlowLines`; it follows the last line
    while the user has not scrolled up."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.flow = FlowLines()

    @property
    def wrap_width(self) -> int:
        """The width lines wrap to: the pane less its scrollbar's column, kept free even while
        no scrollbar shows, so the lines do not re-wrap (or hide a cell) when one appears."""
        return max(self.size.width - self.styles.scrollbar_size_vertical, 1)

    def count_rows(self) -> int:
        return len(self.flow.lines)

    def follow_row(self) -> int | None:
        return len(self.flow.lines) - 1 if self.flow.lines else None

    def build_row(self, row: int, width: int) -> list[Segment]:
        return self.flow.lines[row]

    @property
    def plain(self) -> str:
        """The drawn text, line by line (for tests and screen readers)."""
        return "\n".join("".join(s.text for s in line) for line in self.flow.lines)
