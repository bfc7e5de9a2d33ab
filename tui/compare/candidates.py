"""Both top-K lists at one position, side by side, with what separates them: the KL there, the
largest |Δlogit|, whether the top-1 flips, and where A's pick stands in B (its rank and Δp).

A's pick is the position's ``token``: the token A was fed next (teacher-forced) or A's own
pick (free-running). In each list ★ marks it, and where the top-1s differ the other side's
top-1 is marked too (``A1`` in B's list, ``B1`` in A's), so a flip reads at a glance. Every
figure is the record's own (:class:`~tui.compare.records.Position`)."""

from __future__ import annotations

import re

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..widgets.common import HEX_STYLE, fmt_p, literal
from .records import Position, Side, TopEntry
from .summary import DIMMED, LABEL, VALUE, nats

PICK = Style(color="bright_yellow", bold=True)
OTHER_TOP = Style(color="bright_red", bold=True)
SAME = Style(color="bright_green", bold=True)
HEX = re.compile(r"(<0x[0-9A-F]{2}>)")


def piece(s: str, style: Style | None = None) -> Text:
    """A piece as the app draws one in a list: quoted, whitespace visible, control characters
    and broken bytes spelled out (``<0xNN>`` in red)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("'", DIMMED)
    for part in HEX.split(s):
        if HEX.fullmatch(part):
            t.append(part, HEX_STYLE)
        elif part:
            t.append(literal(part.replace("\n", "↵")), style or Style())
    t.append("'", DIMMED)
    return t


def fine_p(p: float) -> str:
    """A p of A's pick, where the lists' three decimals would read <.001 for most of them."""
    return f"{p:.4f}" if p >= 0.001 else f"{p:.2e}"


def fine_dp(dp: float) -> str:
    return f"{dp:+.4f}" if abs(dp) >= 0.0001 or dp == 0 else f"{dp:+.2e}"


def head_lines(p: Position, a: Side, b: Side, bound: bool) -> Text:
    """Two lines over the lists: the position, its KL, max |Δlogit| and the flip (or not);
    A's pick and where it stands in B."""
    t = Text()
    t.append(f"position {p.position}", LABEL)
    t.append("   KL" + (" bound " if bound else " "), DIMMED)
    t.append(nats(p.kl), VALUE)
    t.append(" nats   max |Δlogit| ", DIMMED)
    t.append(f"{p.max_abs_dlogit:.4f}", VALUE)
    t.append("   ")
    a1 = next((c for c in p.top_a if c.id == p.top1_a), None)
    b1 = next((c for c in p.top_b if c.id == p.top1_b), None)
    if p.same_top:
        t.append("same top-1 ", SAME)
        t.append_text(piece(a1.piece) if a1 else Text(f"#{p.top1_a}"))
    else:
        t.append("top-1 flips: ", OTHER_TOP)
        t.append("A ", DIMMED)
        t.append_text(piece(a1.piece) if a1 else Text(f"#{p.top1_a}"))
        t.append(" · B ", DIMMED)
        t.append_text(piece(b1.piece) if b1 else Text(f"#{p.top1_b}"))
    t.append("\n★ ", PICK)
    t.append("A's pick" if p.token_b is not None else "next token", DIMMED)
    t.append(" ")
    t.append_text(piece(p.piece, PICK))
    t.append(": p ", DIMMED)
    t.append(fine_p(p.p_a), VALUE)
    t.append(" in A, ", DIMMED)
    t.append(fine_p(p.p_b), VALUE)
    t.append(" in B, Δp ", DIMMED)
    t.append(fine_dp(p.dp), VALUE)
    if p.rank_in_b is None:
        t.append(", not in B's top K", DIMMED)
    else:
        t.append(", rank in B ", DIMMED)
        t.append(str(p.rank_in_b + 1), VALUE)  # read from 1: B's top-1 is rank 1
    if p.token_b is not None and p.token_b != p.token:
        t.append("   B picked ", DIMMED)
        # the record's piece: B's pick may be in neither top K
        bp = p.piece_b
        t.append_text(piece(bp, OTHER_TOP) if bp is not None else Text(f"#{p.token_b}"))
    return t


def side_table(
    title: str, rows: tuple[TopEntry, ...], p: Position, mine: int, other: int, remote: bool
) -> Table:
    """One side's top-K: rank (from 1, the top-1 is 1), piece, logit (log p for a server, which sends no logits), p,
    and the marks."""
    t = Table(
        box=None,
        expand=True,
        padding=(0, 1),
        show_edge=False,
        title=title,
        title_justify="left",
        title_style=LABEL,
        header_style=DIMMED,
    )
    t.add_column("#", justify="right", width=2, no_wrap=True)
    t.add_column("piece", ratio=1, no_wrap=True, overflow="ellipsis")
    t.add_column("log p" if remote else "logit", justify="right", width=8, no_wrap=True)
    t.add_column("p", justify="right", width=6, no_wrap=True)
    t.add_column("", width=3, no_wrap=True)
    for i, c in enumerate(rows, start=1):
        mark = Text()
        if c.id == p.token:
            mark.append("★", PICK)
        if c.id == other and other != mine:
            mark.append("A1" if title.startswith("B") else "B1", OTHER_TOP)
        style = PICK if c.id == p.token else None
        t.add_row(str(i), piece(c.piece, style), f"{c.logit:.3f}", fmt_p(c.p), mark)
    return t


def lists(p: Position, a: Side, b: Side, rows: int | None = None) -> Table:
    """A's and B's top-K side by side (their first ``rows`` where the screen is short)."""
    grid = Table.grid(expand=True, padding=(0, 2))
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    grid.add_row(
        side_table(literal(a.label), p.top_a[:rows], p, p.top1_a, p.top1_b, a.remote),
        side_table(literal(b.label), p.top_b[:rows], p, p.top1_b, p.top1_a, b.remote),
    )
    return grid


def detail(
    p: Position | None, a: Side, b: Side, bound: bool, rows: int | None = None
) -> RenderableType:
    """What the cursor opens: the head lines and both lists (``rows`` of each)."""
    if p is None:
        return Text("No position was compared.", DIMMED)
    return Group(head_lines(p, a, b, bound), lists(p, a, b, rows))
