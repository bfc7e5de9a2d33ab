"""The compare screen's words about the whole run: the title, the one-glance sentence (what B's
KV cache takes against A's, how often the top-1 differs) and the figures line. Every number is
a field of :class:`~tui.compare.records.Summary`, formatted; nothing is computed again."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from ..widgets.common import fmt_bytes, literal
from .records import Side, Summary

LABEL = Style(bold=True, color="bright_white")
VALUE = Style(bold=True, color="bright_cyan")
WARN = Style(color="bright_yellow")
DIMMED = Style(color="grey62")


def nats(x: float) -> str:
    """A KL in nats: four significant digits (0.08257, 1.234e-07), 0 as 0."""
    return "0" if x == 0 else f"{x:.4g}"


def title(s: Summary) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("tokenstep compare", LABEL)
    mode = "free-running" if s.mode == "free" else "teacher-forced"
    t.append(f" · {mode} · ", DIMMED)
    t.append(literal(s.a.label), Style(color="bright_green", bold=True))
    t.append("  vs  ", DIMMED)
    t.append(literal(s.b.label), Style(color="bright_magenta", bold=True))
    if s.b.differs:
        t.append(f"  ({literal(' '.join(s.b.differs))})", DIMMED)
    return t


def kv_words(s: Summary) -> str:
    """What B's KV cache takes against A's, from llama.cpp's buffer sizes."""
    a, b = s.a.kv_bytes, s.b.kv_bytes
    if b is None or a is None:
        remote = s.b if b is None else s.a
        return f"{remote.label.split(':')[0]}'s KV cache is on the server (not visible)"
    saving = s.kv_saving
    if saving is None:
        return f"KV cache: A {fmt_bytes(a)}, B {fmt_bytes(b)}"
    if abs(saving) < 0.0005:
        return f"B's KV cache takes as much as A's ({fmt_bytes(b)})"
    return f"B's KV cache takes {1 - saving:.0%} of A's ({fmt_bytes(b)} vs {fmt_bytes(a)})"


def glance(s: Summary) -> Text:
    """The one sentence: KV memory and flips ("B's KV cache takes 28% of A's ...; top-1
    differs at 3 of 16 positions, first at 4")."""
    t = Text()
    t.append(kv_words(s), LABEL)
    t.append("; ")
    flips = f"top-1 differs at {s.n_flips} of {s.n:,} positions"
    if s.first_flip is not None:
        flips += f", first at {s.first_flip}"
    t.append(flips, Style(bold=True, color="bright_red" if s.n_flips else "bright_green"))
    if s.mode == "free":
        where = f"position {s.parted_at}" if s.parted_at is not None else "nowhere"
        t.append(f"; the texts part at {where}", LABEL)
    t.append(".")
    return t


def figures(s: Summary) -> Text:
    """n, KL mean/median/p99/max, same top % (the first flip is in :func:`glance`); then
    what the KL is (a bound, or 0 by construction)."""
    t = Text()
    kl = "KL bound" if s.kl_is_bound else "KL"
    parts: list[tuple[str, str]] = [
        ("n ", f"{s.n:,}"),
        (f"  {kl} mean ", nats(s.kl_mean)),
        ("  median ", nats(s.kl_median)),
        ("  p99 ", nats(s.kl_p99)),
        ("  max ", nats(s.kl_max)),
        (" nats  same top ", f"{s.same_top * 100:.1f}%"),
    ]
    for name, value in parts:
        t.append(name, DIMMED)
        t.append(value, VALUE)
    if s.kl_is_bound:
        t.append(
            "\nB is a server: it sent its top K only, so each KL is a bound from those, not "
            "the full sum.",
            WARN,
        )
    if s.shared_logits:
        t.append(
            "\nB differs from A only in its sampler: both sides share A's logits (every KL is 0 "
            "by construction); only the chains differ.",
            WARN,
        )
    return t


def side_line(side: Side, sampler: bool = False) -> str:
    """One side's configuration, as flags (and its sampler, which only a free-running run
    uses)."""
    kv = fmt_bytes(side.kv_bytes) if side.kv_bytes is not None else "on the server"
    where = "server " if side.remote else ""
    return (
        f"{side.label}: {where}-c {side.n_ctx} -b {side.n_batch} -ub {side.n_ubatch} "
        f"-fa {side.flash_attn} -ctk {side.type_k} -ctv {side.type_v} · KV {kv}"
        + (f" · {side.sampler}" if sampler and side.sampler else "")
    )
