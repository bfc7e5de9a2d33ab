"""The memory pane: what the KV cache costs, taken apart, and what other settings would cost.

Renders an :class:`tui.engine.observe.memory.MemoryReport` (built by the engine's thread) and nothing
else: the per-token formula, grouped-query attention's saving, the cells in use against the
allocation llama.cpp logged, and a calculator over context sizes and cache types."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ..engine.observe.memory import MemoryReport
from .common import fmt_bytes

BAR_W = 30


def usage_bar(used: int, total: int, width: int = BAR_W) -> Text:
    fill = 0 if total <= 0 else min(width, round(width * used / total))
    if used and not fill:
        fill = 1  # one token in use is still visible
    return Text.assemble(("█" * fill, "green"), ("░" * (width - fill), "grey35"))


def render_memory(rep: MemoryReport) -> RenderableType:
    bd = rep.breakdown
    parts: list[RenderableType] = []
    parts.append(Text.assemble(("Per token  ", "bold"), bd.formula()))
    if bd.n_head != bd.n_head_kv:
        parts.append(
            Text(
                f"GQA        {bd.n_head} query heads share {bd.n_head_kv} K/V heads: "
                f"{bd.gqa_factor:.1f}× smaller than full multi-head "
                f"({bd.mha_bytes_per_token:,} B/token, {bd.gqa_saved_per_token:,} B saved)"
            )
        )
    else:
        parts.append(Text("GQA        none: every query head has its own K/V head"))
    parts.append(
        Text.assemble(
            ("In use     ", "bold"),
            usage_bar(rep.used_cells, rep.n_cells),
            f" {rep.used_cells:,} of {rep.n_ctx:,} tokens · {fmt_bytes(rep.used_bytes)} "
            f"of {fmt_bytes(rep.allocated_bytes)} allocated",
        )
    )
    for c in rep.caches:
        mark = ("✓ equals our count", "green") if c.agrees else ("✗ differs from ours", "red")
        parts.append(
            Text.assemble(
                (f"llama.cpp  {c.kind:<7} ", "bold"),
                f"{c.cells:,} cells × {c.layers} layers · K {c.type_k} {c.logged_k_mib:.2f} MiB"
                f" + V {c.type_v} {c.logged_v_mib:.2f} MiB = {c.logged_mib:.2f} MiB ",
                mark,
            )
        )
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("context", justify="right")
    types = list(rep.calc[0].bytes) if rep.calc else []
    for t in types:
        table.add_column(f"{t} (-ctk/-ctv)", justify="right")
    current = rep.breakdown.type_k if rep.breakdown.type_k == rep.breakdown.type_v else None
    for row in rep.calc:
        cells = []
        for t in types:
            style = "bold green" if t == current and row.n_ctx == rep.n_ctx else ""
            cells.append(Text(fmt_bytes(row.bytes[t]), style=style))
        table.add_row(f"{row.n_ctx:,}", *cells)
    parts.append(Text("Calculator (K and V of one type, one sequence):", style="bold"))
    parts.append(table)
    for note in rep.notes:
        parts.append(Text(f"• {note}", style="yellow"))
    return Group(*parts)


class MemoryPane(Static):
    """Shows the latest :class:`MemoryReport`; call :meth:`show_report` from the UI thread."""

    DEFAULT_CSS = "MemoryPane { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("no model yet", id=id, classes=classes)
        self.border_title = "KV memory"
        self.report: MemoryReport | None = None

    def show_missing(self, note: str) -> None:
        """The backend has no KV cells to take apart: say so instead of old numbers."""
        self.report = None
        self.border_subtitle = ""
        self.update(Text(note, style="grey62 italic"))

    def show_report(self, rep: MemoryReport) -> None:
        self.report = rep
        self.border_subtitle = f"{rep.breakdown.bytes_per_token:,} B/token · fa {rep.flash_attn}"
        self.update(render_memory(rep))
