"""The top line: the model (its name from the file, shown literally), chat or raw, the mode
(autoplay or step), what the loop is doing, and how full the context is."""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text

from .common import DIM, Pane, literal

AUTOPLAY = Style(color="black", bgcolor="bright_green", bold=True)
STEP = Style(color="black", bgcolor="bright_yellow", bold=True)
BADGE = Style(bold=True, color="bright_white", bgcolor="dodger_blue3")
# What a narrow header gives up, lowest priority first, until the spec figure fits whole
# (the model's name after it may still be cut: the file's name is on tab 5).
SHEDS = ("where", "activity-words", "spec-words", "fa", "activity", "mode", "chat")


class StatusHeader(Pane):
    DEFAULT_CSS = """
    StatusHeader { height: 1; dock: top; background: $panel; }
    """

    def __init__(self, model_name: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model_name = model_name

    def render(self) -> Text:
        v = self.view
        if v is None:
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(" tokenstep ", BADGE)
            t.append(" loading…", DIM)
            return t
        if not v.header.spec:  # only the spec figure is kept whole; the rest may be cut
            return self._line(v, set())
        width = self.size.width or 200
        shed: set[str] = set()
        for level in range(len(SHEDS) + 1):  # shed the lowest-priority parts first
            shed = set(SHEDS[:level])
            # the cells up to the end of the spec figure, which is never cut
            if self._line(v, shed, stop_after_spec=True).cell_len <= width:
                break
        return self._line(v, shed)

    def _line(self, v: Any, shed: set[str], stop_after_spec: bool = False) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" tokenstep ", BADGE)
        t.append(" ")
        auto = v.mode == "autoplay"
        if "mode" in shed:
            t.append("▶ AUTO" if auto else "‖ STEP", AUTOPLAY if auto else STEP)
        else:
            t.append("▶ AUTOPLAY" if auto else "‖ STEP MODE", AUTOPLAY if auto else STEP)
        t.append(" ")
        if "chat" not in shed:
            t.append(" raw " if v.raw else " chat ", Style(color="black", bgcolor="grey70"))
        if "activity" not in shed:
            long = "activity-words" not in shed
            what = {
                "idle": "waiting for a message" if long else "idle",
                "generating": ("generating" if auto else "paused mid-reply" if long else "paused"),
                "done": f"reply ended: {v.stop_reason or 'stopped'}" if long else "ended",
            }[v.activity]
            t.append(f" {what} ", Style(bold=True))
        t.append("│", DIM)
        cells = v.kv.kv_used if v.capabilities.kv_cells else v.header.n_past
        if cells != v.header.n_past:  # a fork: sequence 0's tokens and the cells, each named
            t.append(f" seq 0 ctx {v.header.n_past:,}/{v.text.n_ctx:,} · KV {cells:,} cells ")
        else:
            t.append(f" ctx {v.header.n_past:,}/{v.text.n_ctx:,} ")  # the record's sequence 0
        t.append("│ ", DIM)
        if v.capabilities.kv_cells and "fa" not in shed:  # a server does not say its -fa
            t.append(f"FA {v.header.flash_attn} ", DIM)
            t.append("│ ", DIM)
        if v.header.spec:  # --spec-type: arithmetic on this run's verify records
            spec = (
                v.header.spec_short
                if "spec-words" in shed and v.header.spec_short
                else v.header.spec
            )
            t.append(f"{spec} ", Style(color="bright_magenta"))
            t.append("│ ", DIM)
        if stop_after_spec:
            return t
        if v.header.where and "where" not in shed:  # llama-server's URL, or layers and KV
            t.append(f"{v.header.where} ", Style(color="bright_cyan"))
            t.append("│ ", DIM)
        # Metadata from the model file: plain text, never markup.
        t.append_text(Text(literal(self.model_name), style=Style(color="grey70")))
        return t
