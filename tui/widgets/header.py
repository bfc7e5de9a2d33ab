"""The top line: the model (its name from the file, shown literally), chat or raw, the mode
(autoplay or step), what the loop is doing, and how full the context is."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from .common import DIM, Pane, literal

AUTOPLAY = Style(color="black", bgcolor="bright_green", bold=True)
STEP = Style(color="black", bgcolor="bright_yellow", bold=True)


class StatusHeader(Pane):
    DEFAULT_CSS = """
    StatusHeader { height: 1; dock: top; background: $panel; }
    """

    def __init__(self, model_name: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model_name = model_name

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" tokenstep ", Style(bold=True, color="bright_white", bgcolor="dodger_blue3"))
        v = self.view
        if v is None:
            t.append(" loading…", DIM)
            return t
        t.append(" ")
        t.append(
            "▶ AUTOPLAY" if v.mode == "autoplay" else "‖ STEP MODE",
            AUTOPLAY if v.mode == "autoplay" else STEP,
        )
        t.append(" ")
        t.append(" raw " if v.raw else " chat ", Style(color="black", bgcolor="grey70"))
        what = {
            "idle": "waiting for a message",
            "generating": "generating" if v.mode == "autoplay" else "paused mid-reply",
            "done": f"reply ended: {v.stop_reason or 'stopped'}",
        }[v.activity]
        t.append(f" {what} ", Style(bold=True))
        t.append("│", DIM)
        t.append(f" ctx {v.header.n_past:,}/{v.text.n_ctx:,} ")  # the record's sequence 0
        t.append("│ ", DIM)
        if v.capabilities.kv_cells:  # a local context (a server does not say its -fa)
            t.append(f"FA {v.header.flash_attn} ", DIM)
            t.append("│ ", DIM)
        if v.header.spec:  # --spec-type: arithmetic on this run's verify records
            t.append(f"{v.header.spec} ", Style(color="bright_magenta"))
            t.append("│ ", DIM)
        if v.header.where:  # llama-server's URL, or where llama.cpp put layers and KV
            t.append(f"{v.header.where} ", Style(color="bright_cyan"))
            t.append("│ ", DIM)
        # Metadata from the model file: plain text, never markup.
        t.append_text(Text(literal(self.model_name), style=Style(color="grey70")))
        return t
