""":  set any sampler parameter by llama.cpp's flag name. The screen lists every flag with its
current value in llama.cpp's notation (bold where it is not llama.cpp's default, dim where the
chain does not use it at these settings) and the chain as it runs now: the one screen with
every sampler value."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ..engine.sampler.sampler_settings import SamplerSettings
from ..worker.sampler_listing import Setting, chain_order, listing
from .common import literal

# One full line each: their values run long.
_WIDE = ("samplers", "sampling-seq", "dry-sequence-breaker", "logit-bias", "grammar")
_SKIP = ("json-schema",)  # it sets the grammar: the grammar line shows it
NAME = Style(color="grey70")
CHANGED = Style(color="bright_cyan", bold=True)
UNUSED = Style(color="grey42")


def _cell(t: Text, st: Setting, width: int, name_w: int = 19) -> None:
    value = st.value if len(st.value) <= width - name_w else st.value[: width - name_w - 1] + "…"
    style = UNUSED if not st.used else CHANGED if st.changed else Style()
    t.append(f"{st.flag:<{name_w}}", UNUSED if not st.used else NAME)
    t.append(literal(value), style)
    t.append(" " * max(width - name_w - len(value), 0))


def flag_table(settings: SamplerSettings | None = None, width: int = 76) -> Text:
    """Every flag with its current value (llama.cpp's defaults without settings), two to a row
    and the long ones on a line of their own, then the chain as it runs now."""
    s = settings if settings is not None else SamplerSettings()
    rows = listing(s)
    by = {st.flag: st for st in rows}
    short = [st for st in rows if st.flag not in _WIDE + _SKIP]
    t = Text(no_wrap=True, overflow="ellipsis")
    half = width // 2
    for i in range(0, len(short), 2):
        for st in short[i : i + 2]:
            _cell(t, st, half)
        t.rstrip()
        t.append("\n")
    names = by["samplers"]
    order = Setting(
        "sampling-seq",
        f"{by['sampling-seq'].value}  (samplers {names.value})",
        names.changed,
        names.used,
    )
    for st in (order, by["dry-sequence-breaker"], by["logit-bias"], by["grammar"]):
        _cell(t, st, width, 21)
        t.rstrip()
        t.append("\n")
    t.append("chain now ", NAME)
    t.append(chain_order(s))
    if s.off:
        t.append(f"  (off: {', '.join(s.off)})", Style(color="red"))
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
        view = getattr(self.app, "view", None)
        settings = view.settings if view is not None else None
        with Vertical() as box:
            box.border_title = "Sampler settings now (llama.cpp's flags)"
            box.border_subtitle = "bold: not the default · dim: unused by this chain"
            yield Static(flag_table(settings), id="chain-values")
            yield Input(placeholder="e.g. repeat-penalty 1.2  ·  sampling-seq kpmt", id="chain-set")
            yield Static(Text("Enter sets it (the chain re-runs, no decode) · Esc cancels"))

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
