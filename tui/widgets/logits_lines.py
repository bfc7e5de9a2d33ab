"""The logits pane's lines above the candidates: the settings of the stages the chain has, the
chain with the count after each stage, and what the stages did. Each wraps onto a second line
when the pane is narrow, so the end of the chain is never cut off."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from ..engine.sampler.chain_stages import chain_defs
from ..worker.views import View
from .common import DIM

NEXT = Style(color="bright_green", bold=True)
CUT = Style(color="red")
VALUE = Style(bold=True, color="bright_cyan")
# The settings line's short value per stage (llama.cpp's names).
_SHORT = {
    "top_k": lambda s: "off" if s.top_k == 0 else str(s.top_k),
    "top_p": lambda s: f"{s.top_p:.2f}",
    "min_p": lambda s: f"{s.min_p:.2f}",
    "typ_p": lambda s: f"{s.typical_p:.2f}",
}


def pack(chunks: list[Text], width: int, max_lines: int = 2) -> list[Text]:
    """Lay ``chunks`` out left to right, breaking between chunks, on at most ``max_lines``
    lines of ``width`` cells; the last line ends in … if the rest does not fit."""
    lines = [Text(no_wrap=True, overflow="ellipsis")]
    for ch in chunks:
        cur = lines[-1]
        piece = ch.copy()
        if cur.cell_len and cur.cell_len + piece.cell_len > width and len(lines) < max_lines:
            piece = piece[len(piece.plain) - len(piece.plain.lstrip()) :]
            lines.append(Text(no_wrap=True, overflow="ellipsis"))
            cur = lines[-1]
        cur.append_text(piece)
    for line in lines:
        line.rstrip()
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
    return lines


def _chunk(*parts: tuple[str, Style | None]) -> Text:
    t = Text(no_wrap=True)
    for s, style in parts:
        t.append(s, style or Style())
    return t


def settings_lines(v: View, width: int, most: int = 2) -> list[Text]:
    """The settings of the stages this chain has (mirostat has only temperature), then the
    picker: ``temp 0.80  top-k 40 ... seed 42`` or ``greedy (argmax)``."""
    s = v.settings
    chunks = []
    if s.is_greedy:
        chunks.append(_chunk(("greedy", NEXT), (" (argmax)", DIM)))
    for sdef in chain_defs(s):
        if s.is_greedy and sdef.name == "temperature":
            continue
        value = _SHORT[sdef.name](s) if sdef.name in _SHORT else sdef.param(s)
        chunks.append(
            _chunk(("  " if chunks else "", None), (f"{sdef.label} ", DIM), (value, VALUE))
        )
    if not s.is_greedy and s.mirostat:
        chunks.append(
            _chunk(
                ("  ", None),
                (f"mirostat {s.mirostat} ", DIM),
                (f"τ {s.mirostat_tau:g} η {s.mirostat_eta:g}", VALUE),
            )
        )
    if not s.is_greedy:
        chunks.append(_chunk(("  seed ", DIM), (str(s.seed), VALUE)))
    if s.off:
        chunks.append(_chunk((f"  off: {', '.join(s.off)}", CUT)))
    return pack(chunks, width, most)


def chain_lines(v: View, width: int, picked: str | None) -> list[Text]:
    """Every stage in order with the candidates that can still be picked after it; the
    stage under the chain cursor (``[``/``]``) underlined, stages turned off (``x``) as off."""
    chain = v.logits.chain
    if chain is None:
        return [Text()]
    rv = v.logits.remote
    chunks = [
        _chunk((f"top {rv.n_top} of {v.text.n_vocab:,}" if rv else f"{v.text.n_vocab:,}", None))
    ]
    for st, n in zip(chain.stages, chain.shown_counts(), strict=True):
        mark = Style(underline=True) if st.key and st.key == picked else Style()
        chunks.append(_chunk((f" →{st.name} ", DIM + mark), (f"{n:,}", Style(bold=True) + mark)))
    s = v.settings
    for name in s.off:
        under = Style(underline=True) if name == picked else Style()
        chunks.append(_chunk((f" ({name} off)", CUT + under)))
    if (
        picked
        and v.action == "settings"  # just after a chain key: say where the cursor is
        and picked not in s.off
        and not any(st.key == picked for st in chain.stages)
    ):
        why = f"not in the chain under mirostat {s.mirostat}" if s.mirostat else "neutral"
        chunks.append(_chunk((f" ({picked}: {why})", DIM + Style(underline=True))))
    return pack(chunks, width)


def did_lines(v: View, width: int, most: int = 2) -> list[Text]:
    """What each stage did, when one did something worth a word (none: no line)."""
    chain = v.logits.chain
    if chain is None:
        return []
    chunks: list[Text] = []
    for st in chain.stages:
        what = st.note
        if st.key == "grammar":
            what += (
                " · the chain's pick broke it: grammar first, the chain again"
                if chain.grammar_first
                else " · it checked the chain's pick: allowed"
            )
        if st.changed and not what:
            first = st.changed[0]
            why = st.why.get(first[0], "")
            what = f"{len(st.changed)} moved, e.g. {first[1]:.2f}→{first[2]:.2f} {why}".rstrip()
        if what:  # word by word, so a long note wraps rather than runs off the pane
            chunks.append(_chunk(("  " if chunks else "", None), (f"{st.name}:", DIM)))
            chunks += [_chunk((" " + word, None)) for word in what.split()]
    return pack(chunks, width, most) if chunks else []
