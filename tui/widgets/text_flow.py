"""The conversation text as flowing atoms, rebuilt only where it changed.

The text pane shows the whole context. Rebuilding and re-wrapping all of it for every frame
costs O(context) per frame, which at a few thousand tokens takes longer than a decode step.
Here each span of the conversation (a message, the reply) is a :class:`_Block` that keeps
its atoms, one per word: a new word starts at a piece that begins with a space, and a newline
ends a line. When tokens are appended (or the newest-token marker moves), a block redoes only
its last word onwards, resuming the UTF-8 decoder from the state saved at that word's start.
:class:`~tui.widgets.flow.FlowLines` then re-wraps only from the first new atom.

The output must equal what ``ConversationPane.build`` draws with Rich for the same view (the
tests compare the two); that builder is still used after a fork, for the side-by-side columns.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style

from ..worker.views import View
from .common import DIM, GAP, HEX_STYLE, ROLE_NAMES, ROLE_STYLES, literal
from .flow import Atom

_HEX = re.compile(r"(<0x[0-9A-F]{2}>)")


@dataclass(frozen=True)
class Part:
    """One piece of the conversation as drawn: a role header, a run of tokens, or the marker
    where a context shift cut the text."""

    kind: str  # "head", "body" or "gap"
    role: str = ""
    start: int = 0
    end: int = 0
    cut: bool = False  # a body that ends where the shift cut (its pending bytes are gone)


def conversation_parts(v: View, end: int) -> Iterator[Part]:
    """The conversation's tokens [0, end) in drawing order: template text is skipped, each
    message gets a header (not in raw mode), and the shift marker stands right after the
    n_keep tokens every shift keeps. Both the Rich builder and :class:`TextFlow` draw this."""
    gap = v.cache.shifts[-1].n_keep if v.cache.shifts else None
    gap_drawn = False
    for sp in v.text.spans:
        start, stop = sp.start, min(sp.end, end)
        if stop <= start:
            continue
        has_gap = gap is not None and not gap_drawn and start <= gap < stop
        if sp.role == "template":
            if has_gap:
                yield Part("gap")
                gap_drawn = True
            continue
        if not v.raw:
            yield Part("head", sp.role)
        if has_gap and gap is not None:
            yield Part("body", sp.role, start, gap, cut=True)
            yield Part("gap")
            gap_drawn = True
            yield Part("body", sp.role, gap, stop)
        else:
            yield Part("body", sp.role, start, stop)
    if gap is not None and not gap_drawn:
        yield Part("gap")


@dataclass
class _Block:
    """One span's text: atoms per word, and where each word starts (token index and the
    decoder's state there) so appending tokens redoes only the last word."""

    key: tuple[Any, ...]  # what the block's look depends on besides its tokens
    tokens: tuple[int, ...] = ()
    newest: int | None = None  # index in the block of the marked token
    styles: tuple[Style | None, ...] = ()  # per token: the surprise map's background
    atoms: list[Atom] = field(default_factory=list)
    starts: list[tuple[int, Any]] = field(default_factory=list)  # per atom: token, decoder
    pending: bytes = b""  # bytes of an unfinished character at the end
    changed_at: int = 0  # index of the first atom the last update rebuilt


class TextFlow:
    """Builds the pane's atoms for a view, reusing every block and atom that did not change."""

    def __init__(self) -> None:
        self._blocks: dict[tuple[Any, ...], _Block] = {}

    def reset(self) -> None:
        self._blocks = {}

    def atoms(
        self,
        v: View,
        *,
        boundaries: bool,
        newest_style: Style,
        boundary_styles: tuple[Style, ...],
        token_styles: tuple[Style | None, ...] = (),
    ) -> list[Atom]:
        """``token_styles``: one extra style (or None) per context token, drawn over the
        role's (the surprise map, the run chart's cursor)."""
        out: list[Atom] = []
        newest = v.text.n_past - 1 if v.text.reply_tokens and v.activity == "generating" else None
        used: dict[tuple[Any, ...], _Block] = {}
        for part in conversation_parts(v, v.text.n_past):
            if part.kind == "gap":
                out.append(gap_atom(v))
                continue
            style = ROLE_STYLES.get(part.role, Style())
            if part.kind == "head":
                if out:
                    out.append(Atom((), 0, True))  # the newline before the next message
                head = f"{ROLE_NAMES.get(part.role, part.role)} ▸ "
                out.append(Atom((Segment(head, style + Style(bold=True)),), cell_len(head)))
                continue
            a, b = part.start, part.end
            key = (part.role, a, boundaries, v.raw)
            block = self._blocks.get(key) or _Block(key)
            mark = newest - a if newest is not None and a <= newest < b else None
            _update(
                block,
                v.text.tokens[a:b],
                v.text.pieces,
                a,
                style,
                mark,
                boundaries,
                newest_style,
                boundary_styles,
                token_styles[a:b],
            )
            used[key] = block
            out.extend(block.atoms)
            if block.pending:
                out.append(Atom((Segment("⋯", DIM),), 1))
                if not part.cut:
                    note = f"({len(block.pending)} byte(s) of a character still to come)"
                    out.append(Atom((Segment(note, DIM),), cell_len(note)))
        self._blocks = used
        out.extend(spec_tail(v))
        if not v.raw and v.text.reply_start is not None and not v.text.reply_tokens:
            out.append(Atom((), 0, True))
            head = "model ▸ "
            out.append(
                Atom((Segment(head, ROLE_STYLES["reply"] + Style(bold=True)),), cell_len(head))
            )
        if v.activity == "generating" and v.mode == "step":
            out.append(Atom((Segment("▌", Style(color="bright_yellow")),), 1))
            if not v.text.reply_tokens:  # sent in step mode: nothing plays until a key says so
                out.append(Atom((Segment("  ", DIM),), 2))
                out.append(Atom((Segment(STEP_HINT, DIM),), cell_len(STEP_HINT)))
        elif v.activity == "done" and v.stop_reason:
            tail = f"[{v.stop_reason}]"  # after two spaces that stay on the text's line
            out.append(Atom((Segment("  ", DIM),), 2))
            out.append(Atom((Segment(tail, DIM),), cell_len(tail)))
        return out


STEP_HINT = "→ decodes the first token, space plays the reply"
REJECTED = Style(color="red", strike=True)
PENDING = Style(color="black", bgcolor="bright_magenta")


def spec_tail(v: View) -> list[Atom]:
    """--spec-type: after the context, the round's first rejected draft token struck
    through, then the target's pick that replaced it (or came after a fully accepted
    draft): picked, not decoded yet, the next verify batch's first token."""
    sp = v.text.spec
    if sp is None or sp.pending is None:
        return []
    out = []
    for piece, style in ((sp.rejected, REJECTED), (sp.pending, PENDING)):
        if piece is None:
            continue
        text = literal(piece.decode("utf-8", errors="replace"))
        out.append(Atom((Segment(text, style),), cell_len(text)))
    return out


def gap_words(v: View) -> str:
    """Where a context shift cut the text: how many tokens are gone, over how many shifts."""
    n = sum(len(ev.forgotten) for ev in v.cache.shifts)
    k = len(v.cache.shifts)
    return f" ⟪{n:,} tokens forgotten · {k} shift{'s' if k > 1 else ''}⟫ "


def gap_atom(v: View) -> Atom:
    text = gap_words(v)
    return Atom((Segment(text, GAP),), cell_len(text))


def plain_of(atoms: list[Atom]) -> str:
    return "".join("".join(s.text for s in a.segments) + ("\n" if a.brk else "") for a in atoms)


def _update(
    block: _Block,
    tokens: tuple[int, ...],
    pieces: tuple[bytes, ...],
    offset: int,
    style: Style,
    newest: int | None,
    boundaries: bool,
    newest_style: Style,
    boundary_styles: tuple[Style, ...],
    styles: tuple[Style | None, ...] = (),
) -> None:
    """Bring ``block`` up to ``tokens`` (the view's tokens [offset, offset + len))."""
    old = block.tokens
    n = min(len(old), len(tokens))
    k = n if old[:n] == tokens[:n] else next(i for i in range(n) if old[i] != tokens[i])
    if styles != block.styles:  # the map's scale or a token's value changed: redo from there
        was = block.styles
        upto = min(len(was), len(styles))
        k = min(k, next((i for i in range(upto) if was[i] != styles[i]), upto))
    for m in (block.newest, newest):
        if m is not None:
            k = min(k, m)
    # Redo from the word that holds token k: drop that word and everything after it. A token
    # with a newline inside starts several atoms; redo from the first of them.
    starts = block.starts
    j = len(starts)
    while j > 0 and starts[j - 1][0] > k:
        j -= 1
    if j > 0:
        j -= 1
        while j > 0 and starts[j - 1][0] == starts[j][0]:
            j -= 1
        tok, state = starts[j]
    else:
        tok, state = 0, None
    del block.atoms[j:]
    del block.starts[j:]
    block.changed_at = j
    dec = codecs.getincrementaldecoder("utf-8")(errors="tokenstep-hex")
    if state is not None:
        dec.setstate(state)
    word: list[Segment] = []
    word_w = 0
    word_start: tuple[int, Any] | None = None

    def close(brk: bool) -> None:
        nonlocal word, word_w, word_start
        if word or brk:
            assert word_start is not None
            block.atoms.append(Atom(tuple(word), word_w, brk, trim=True))
            block.starts.append(word_start)
        word, word_w, word_start = [], 0, None

    for i in range(tok, len(tokens)):
        state_here = dec.getstate()
        chunk = dec.decode(pieces[offset + i], final=False)
        st = style
        if boundaries:
            st = st + boundary_styles[i % 2]
        extra = styles[i] if i < len(styles) else None
        if extra is not None:
            st = st + extra
        if i == newest:
            st = st + newest_style
        chunk = literal(chunk, keep_newlines=True)
        if chunk[:1] == " " and word:
            close(False)  # a piece that begins with a space begins a new word
        lines = chunk.split("\n")
        for li, line in enumerate(lines):
            if li:  # a newline ends the word and the line
                if word_start is None:
                    word_start = (i, state_here)
                if boundaries:
                    word.append(Segment("↵", st))
                    word_w += 1
                close(True)
            if not line:
                continue
            if word_start is None:
                word_start = (i, state_here)
            for part in _HEX.split(line) if "<0x" in line else (line,):
                if part:
                    word.append(Segment(part, st + HEX_STYLE if part.startswith("<0x") else st))
                    word_w += cell_len(part)
        if not chunk and word_start is None and dec.getstate()[0]:
            word_start = (i, state_here)  # a character's first bytes: the word starts here
    close(False)
    block.pending, _ = dec.getstate()
    block.tokens = tokens
    block.newest = newest
    block.styles = styles
