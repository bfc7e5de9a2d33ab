""":  set any sampler parameter by llama.cpp's flag name; every flag is listed with its default."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ..worker.chain_edit import FLAGS, default_of


def flag_table(width: int = 76) -> Text:
    """Every flag with llama.cpp's default, packed into columns."""
    cells = [f"{name} {default_of(name)}" for name in FLAGS]
    cells = [c if len(c) <= 36 else c[:35] + "…" for c in cells]
    col = max(len(c) for c in cells) + 2
    per_row = max(width // col, 1)
    t = Text(style="grey70")
    for i, c in enumerate(cells):
        t.append(c.ljust(col) if (i + 1) % per_row else c + "\n")
    return t


class ChainScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel", show=False)]
    DEFAULT_CSS = """
    ChainScreen { align: center middle; }
    ChainScreen > Vertical {
        width: 80; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Sampler parameter (llama.cpp's flag names · defaults)"
            yield Static(flag_table())
            yield Input(
                placeholder="e.g. repeat-penalty 1.2  ·  samplers top_k;temperature", id="chain-set"
            )
            yield Static(Text("Enter sets it (the chain re-runs, no decode) · Esc cancels"))

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
