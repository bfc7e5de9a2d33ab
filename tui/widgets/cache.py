"""The cache-lesson tabs: KV memory, and the cache pane (verify, the quadratic wall, prefix
reuse per turn, the context-full policy with what a shift forgot, and forked sequences).

Both draw a :class:`~tui.worker.views.View` only: every number was copied out of the engine by
the worker thread (a :class:`MemoryReport`, a :class:`WorkSnapshot`, a :class:`VerifyResult`,
the engine's prefill turns and shift events)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..engine.model.tokens import quoted
from ..engine.observe.memory import MemoryReport
from ..engine.run.step import ShiftEvent
from ..engine.run.verify import VerifyResult
from ..worker.views import View
from .common import literal
from .kvcache import SEQ_COLORS
from .memory import MemoryPane
from .quadratic import QuadraticPane

MAX_CELLS_SHOWN = 96  # per-sequence mask row: the newest cells when the cache holds more


def _text(data: bytes) -> str:
    return literal(data.decode("utf-8", errors="replace"))


class MemoryTab(VerticalScroll):
    """Tab 9: the KV memory pane fed from the worker's view (scrolls: the calculator is long)."""

    DEFAULT_CSS = "MemoryTab > MemoryPane { height: auto; }"

    def compose(self) -> ComposeResult:
        yield MemoryPane()

    @property
    def report(self) -> MemoryReport | None:
        return self.query_one(MemoryPane).report

    def show(self, view: View) -> None:
        note = view.capabilities.missing("kv_cells")
        if note is not None:
            pane = self.query_one(MemoryPane)
            pane.show_missing(note)
            self.border_title = pane.border_title
            self.border_subtitle = pane.border_subtitle
        elif view.cache.memory is not None:
            pane = self.query_one(MemoryPane)
            pane.show_report(view.cache.memory)
            self.border_title = pane.border_title
            self.border_subtitle = pane.border_subtitle


def render_verify(
    res: VerifyResult, pieces: tuple[bytes, bytes] | None = None
) -> RenderableType:
    ok, bad = Style(color="green", bold=True), Style(color="red", bold=True)
    cached, fresh = (
        (quoted(pieces[0], res.top1_cached), quoted(pieces[1], res.top1_fresh))
        if pieces is not None
        else (str(res.top1_cached), str(res.top1_fresh))
    )
    top1 = Text.assemble(
        "top-1 ",
        ("agrees" if res.top1_agree else "DISAGREES", ok if res.top1_agree else bad),
        f" (cached {literal(cached)}, fresh {literal(fresh)})",
    )
    top10 = Text.assemble(
        "top-10 order ",
        ("agrees" if res.top10_order_agree else "differs", ok if res.top10_order_agree else bad),
        f" ({res.top10_same_rank}/10 ranks hold the same token)",
    )
    return Group(
        Text.assemble(
            ("Verify ", "bold"),
            f"({res.mode}) recomputed {res.n_tokens:,} tokens in a fresh context, "
            f"{res.n_calls} llama_decode call(s), {res.recompute_ms:.0f} ms",
        ),
        Text.assemble(
            "max |Δ| ",
            (f"{res.max_abs_diff:.3g}", ok if res.exact else Style(color="yellow", bold=True)),
            f"  mean |Δ| {res.mean_abs_diff:.3g}  ",
            top1,
            "  ",
            top10,
        ),
        Text(res.explain(), style="grey62"),
    )


def render_turns(view: View) -> RenderableType:
    if not view.cache.turns:
        return Text("Prefix reuse: no prompt yet.", style="grey50")
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("turn", "reused", "computed", "prefill ms"):
        table.add_column(col, justify="right")
    for i, t in enumerate(view.cache.turns, 1):
        table.add_row(
            str(i), Text(f"{t.reused:,}", style="green"), f"{t.computed:,}", f"{t.prefill_ms:.1f}"
        )
    head = Text.assemble(
        ("Prefix reuse per turn ", "bold"),
        "(prompt tokens already in the KV cache vs decoded now)",
    )
    return Group(head, table)


def render_shifts(view: View, shifts: tuple[ShiftEvent, ...]) -> RenderableType:
    policy = (
        f"shift: keep the first {view.cache.n_keep} tokens, forget the oldest half of the rest"
        if view.cache.context_full == "shift"
        else "stop with a message (--context-full shift forgets the oldest half instead)"
    )
    parts: list[RenderableType] = [
        Text.assemble(
            ("When the context fills ", "bold"),
            f"({in_use(view)}): {policy}",
        )
    ]
    for ev, pieces in zip(shifts, view.cache.shift_pieces, strict=False):
        gone = b"".join(pieces)
        lo, hi = (ev.forgotten[0].pos, ev.forgotten[-1].pos) if ev.forgotten else (0, 0)
        parts.append(
            Text.assemble(
                (f"shift {ev.index + 1}", "bold yellow"),
                f" before decode #{ev.before_record}: {ev.n_past:,} tokens, kept {ev.n_keep}, "
                f"forgot {ev.n_discard} (positions {lo}–{hi}), the rest moved back "
                f"{ev.n_discard} positions: ",
                (_text(gone), Style(color="grey50", strike=True)),
            )
        )
    return Group(*parts)


def render_seqs(view: View) -> RenderableType:
    if view.text.fork_at is None or not view.text.seqs:
        cannot = view.capabilities.missing("fork")
        how = "F forks it into two" if cannot is None else f"a fork {cannot}"
        return Text(f"Sequences: one ({how}).", style="grey50")
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=True)
    for sv in view.text.seqs:
        colour = SEQ_COLORS[sv.seq_id % len(SEQ_COLORS)]
        stop = f" · {sv.stop_reason}" if sv.stop_reason else ""
        table.add_column(Text(f"seq {sv.seq_id}: {sv.n_tokens} cells{stop}", style=colour), ratio=1)
    table.add_row(*(Text(_text(b"".join(sv.pieces)) or "…") for sv in view.text.seqs))
    shared = sum(1 for _, _, seqs in view.kv.kv_cells if len(seqs) > 1)
    parts: list[RenderableType] = [
        Text.assemble(
            ("Sequences ", "bold"),
            f"forked at {view.text.fork_at} tokens; {shared} KV cells are shared by both "
            "(▓ in the KV grid); each step is ONE llama_decode with a token per sequence.",
        ),
        table,
        Text("Mask per sequence (a query sees a KV cell only if the cell holds its seq_id):"),
    ]
    cells = view.kv.kv_cells
    start = max(0, len(cells) - MAX_CELLS_SHOWN)
    for sv in view.text.seqs:
        colour = SEQ_COLORS[sv.seq_id % len(SEQ_COLORS)]
        row = Text(f"  seq {sv.seq_id} ")
        if start:
            row.append("… ", "grey50")
        for _, _, seqs in cells[start:]:
            if sv.seq_id in seqs:
                row.append("▓" if len(seqs) > 1 else "█", colour)
            else:
                row.append("·", "grey30")
        parts.append(row)
    return Group(*parts)


def in_use(view: View) -> str:
    """What fills the context, each figure named: the KV cells in use (a fork's shared cells
    once), and sequence 0's tokens beside them when they differ; over llama-server, tokens."""
    n_ctx = view.text.n_ctx
    if not view.capabilities.kv_cells:
        return f"{view.text.n_past:,} of {n_ctx:,} tokens in use now"
    said = f"{view.kv.kv_used:,} of {n_ctx:,} KV cells in use now"
    if view.kv.kv_used != view.text.n_past:
        said += f"; sequence 0 holds {view.text.n_past:,} tokens"
    return said


def footer(view: View) -> str:
    """Tab 0's footer: the cells in use, or over llama-server (no cells to count) the
    context's tokens, and the context-full policy."""
    used = (
        f"KV {view.kv.kv_used:,}/{view.text.n_ctx:,}"
        if view.capabilities.kv_cells
        else f"{view.text.n_past:,}/{view.text.n_ctx:,} tokens"
    )
    return f"{used} · {view.cache.context_full}"


class CacheTab(VerticalScroll):
    """Tab 0: the cache lessons for the running model, newest events first."""

    DEFAULT_CSS = "CacheTab > Static { height: auto; margin-bottom: 1; }"

    def compose(self) -> ComposeResult:
        yield Static(Text("Sequences: one.", style="grey50"), id="c-seqs")
        yield Static(
            Text("v verifies the cache: recompute from scratch.", style="grey50"), id="c-verify"
        )
        yield Static(id="c-shift")
        yield Static(id="c-turns")
        yield QuadraticPane(id="c-work")

    def show(self, view: View) -> None:
        self.border_subtitle = footer(view)
        self.query_one("#c-seqs", Static).update(render_seqs(view))
        cannot_verify = view.capabilities.missing("verify")
        if cannot_verify is not None:
            self.query_one("#c-verify", Static).update(
                Text(f"Verify {cannot_verify}.", style="grey62 italic")
            )
        elif view.cache.verify is not None:
            self.query_one("#c-verify", Static).update(render_verify(view.cache.verify, view.cache.verify_pieces))
        self.query_one("#c-shift", Static).update(render_shifts(view, view.cache.shifts))
        self.query_one("#c-turns", Static).update(render_turns(view))
        if view.cache.work is not None:
            self.query_one(QuadraticPane).show_snapshot(view.cache.work)
