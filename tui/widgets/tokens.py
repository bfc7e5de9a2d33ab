"""Tab 1 (key 1), tokens: every token in the context as a coloured chip (``#`` shows the ids), with
token counts next to character counts. Pieces are drawn as bytes really are: a space is ␣, a
newline ↵, and a byte that is not valid UTF-8 on its own is shown as ``<0xNN>``."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from ..worker.chat import Span
from ..worker.views import View
from .common import (
    CHIP_BACKGROUNDS,
    DIM,
    ROLE_NAMES,
    ROLE_STYLES,
    is_special,
    piece_text,
)
from .flow import Atom, FlowPane, changed_from

ChipKey = tuple[int, str, bool]  # token, role, drawn as the newest
SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def chars_of(pieces: tuple[bytes, ...], start: int, end: int) -> int:
    return len(b"".join(pieces[start:end]).decode("utf-8", errors="replace"))


class TokensPane(FlowPane):
    """Chips flow into lines incrementally (see :mod:`.flow`): a new token re-wraps only the
    last line or two, so the pane costs the same at 50 tokens and at 8,000."""

    DEFAULT_CSS = """
    TokensPane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.show_ids = False
        self._chips: list[Atom] = []
        self._key: tuple[ChipKey, ...] = ()  # per token: what its chip shows
        self._tokens: tuple[int, ...] = ()  # the view they were built for
        self._spans: tuple[Span, ...] = ()
        self._newest = 0

    def toggle_ids(self) -> None:
        self.show_ids = not self.show_ids
        self._forget()
        if self.view is not None:
            self.show(self.view)

    def titles(self, v: View) -> None:
        """Token count against character count, in the border: overall, then per origin."""
        n = v.text.n_past
        chars = chars_of(v.text.pieces, 0, n)
        title = f"tokens · {n:,} tokens, {chars:,} chars"
        if n:
            title += f" ({chars / n:.2f} chars/token)"
        self.border_title = title
        roles: dict[str, list[int]] = {}
        for sp in v.text.spans:
            acc = roles.setdefault(sp.role, [0, 0])
            acc[0] += sp.end - sp.start
            acc[1] += chars_of(v.text.pieces, sp.start, sp.end)
        parts = [f"{ROLE_NAMES.get(r, r)} {nt:,}/{nc:,}" for r, (nt, nc) in roles.items()]
        self.border_subtitle = " · ".join(parts) + " (tokens/chars)" if parts else ""

    def _forget(self) -> None:
        """Drop every cached chip: the next view builds them all."""
        self._chips, self._key, self._tokens, self._spans, self._newest = [], (), (), (), 0

    def _chip_keys(self, v: View) -> tuple[tuple[ChipKey, ...], int]:
        """What decides each chip's look: token, role, and whether it is the newest reply
        token (drawn reversed); equal keys mean an equal chip. Also the first index that may
        differ from the previous view: only chips from there on are looked at again."""
        old = self._key
        k = changed_from(self._tokens, v.text.tokens)
        newest = v.text.n_past - 1
        # The reversed "newest" chip moves: both the old one and the new one are redrawn.
        k = max(0, min(k, _spans_changed_at(self._spans, v.text.spans), self._newest, newest))
        reply = v.text.reply_start if v.text.reply_start is not None else v.text.n_past
        role_at = ["template"] * (v.text.n_past - k)
        for sp in v.text.spans:
            lo, hi = max(sp.start, k), min(sp.end, v.text.n_past)
            if hi > lo:
                role_at[lo - k : hi - k] = [sp.role] * (hi - lo)
        tail = tuple(
            (v.text.tokens[i], role_at[i - k], i == newest and i >= reply) for i in range(k, v.text.n_past)
        )
        self._tokens, self._spans, self._newest = v.text.tokens, v.text.spans, newest
        return old[:k] + tail, k

    def _chip(self, v: View, i: int, key: ChipKey) -> Atom:
        data = v.text.pieces[i]
        bg = CHIP_BACKGROUNDS[i % len(CHIP_BACKGROUNDS)]
        chip = piece_text(data, ROLE_STYLES.get(key[1], Style()), special=is_special(data))
        chip.stylize(Style(bgcolor=bg))
        if key[2]:
            chip.stylize(Style(reverse=True))
        if self.show_ids:
            chip.append(str(v.text.tokens[i]).translate(SUBSCRIPT), Style(color="grey70", bgcolor=bg))
        chip.append(" ")
        segs = tuple(s for s in chip.render(self.app.console) if s.text != "\n")
        return Atom(segs, chip.cell_len, data.endswith(b"\n"))

    def chips(self, v: View) -> Text:
        """Every chip as one Text (tests read it; the pane itself draws the flowed lines)."""
        self._update_chips(v)
        return Text("").join(
            Text.assemble(*((s.text, s.style or "") for s in a.segments)) for a in self._chips
        )

    def _update_chips(self, v: View) -> int:
        keys, k = self._chip_keys(v)
        k = k + changed_from(self._key[k:], keys[k:])
        self._chips = self._chips[:k] + [self._chip(v, i, keys[i]) for i in range(k, len(keys))]
        self._key = keys
        return k

    def show(self, view: View) -> None:
        self.view = view
        self.titles(view)
        if not view.text.tokens:
            words = "No tokens yet. Each piece of the prompt and the reply appears here.".split(" ")
            atoms = []
            for i, word in enumerate(words):  # one atom a word: lines break between words
                hint = Text(word if i == 0 else " " + word, DIM)
                segs = tuple(s for s in hint.render(self.app.console) if s.text != "\n")
                atoms.append(Atom(segs, hint.cell_len, trim=i > 0))
            self._forget()
            self.flow.update(atoms, 0, self.wrap_width)
        else:
            k = self._update_chips(view)
            self.flow.update(self._chips, k, self.wrap_width)
        self.relayout()

    def on_resize(self) -> None:
        if self.view is not None:
            self.flow.update(self.flow.atoms, 0, self.wrap_width)
        super().on_resize()


def _spans_changed_at(old: tuple[Span, ...], new: tuple[Span, ...]) -> int:
    """The first token whose span (role) may differ between two views' span lists."""
    for a, b in zip(old, new, strict=False):
        if a == b:
            continue
        if (a.role, a.start) == (b.role, b.start):
            return min(a.end, b.end)  # the same span, grown or shrunk
        return min(a.start, b.start)
    if len(old) == len(new):
        return 1 << 62
    shorter = old if len(old) < len(new) else new
    longer = new if shorter is old else old
    return longer[len(shorter)].start
