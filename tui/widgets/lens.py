"""The logit lens pane (tab 8): what each layer would predict if the model stopped there.

Layers down, the top 5 tokens of each with p (the layer's ``l_out`` projected through the
model's own head, :mod:`tui.engine.lens`); the marked token (llama.cpp's top-1 for the
preview, the token sampled for the last step) in bold wherever it appears, and the layers
where it first enters the top 5 and the top 1 flagged. The footer shows the check of the whole
method: the last layer's max |Δ| against llama.cpp's own logits. Draws a
:class:`~tui.worker.lens.LensView` built on the decode thread; a backend without the lens gets
the sentence ``Capabilities.missing`` gives.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..engine.tokens import escape_controls
from ..worker.lens import LensStep, LensView

MODE_NAMES = {"preview": "preview", "last": "last step"}
PIECE_W = 10


def _piece(text: str) -> str:
    shown = escape_controls(text).replace(" ", "␣")
    return shown if len(shown) <= PIECE_W else shown[: PIECE_W - 1] + "…"


def render_lens(step: LensStep, mode: str) -> RenderableType:
    check = step.check
    head = Text.assemble(
        ("Logit lens ", "bold"),
        (f"· {MODE_NAMES.get(mode, mode)}: ", ""),
        (f"position {step.pos} predicted · marked ", "grey70"),
        (repr(step.mark_piece), "bold bright_cyan"),
        (f" ({step.mark_what})", "grey70"),
    )
    enters = Text.assemble(
        "first in the top 5 at ",
        (f"layer {step.first_top5}" if step.first_top5 is not None else "no layer", "yellow"),
        " · first top-1 at ",
        (f"layer {step.first_top1}" if step.first_top1 is not None else "no layer", "green"),
    )
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
    table.add_column("layer", justify="right")
    for i in range(5):
        table.add_column(f"#{i + 1}", no_wrap=True)
    table.add_column("", no_wrap=True)
    for entry in step.layers:
        layer = entry["layer"]
        cells: list[Text] = []
        for t in entry["top"][:5]:
            style = "bold bright_cyan" if t["id"] == step.mark else ""
            cells.append(
                Text.assemble(
                    (f"{_piece(t['piece']):<{PIECE_W}}", style), (f" {t['p']:.2f}", "grey62")
                )
            )
        flag = Text()
        if layer == step.first_top1:
            flag.append("★ first top-1", "green")
        elif layer == step.first_top5:
            flag.append("▸ first in the top 5", "yellow")
        table.add_row(Text(str(layer), "grey62"), *cells, flag)
    foot = Text.assemble(
        ("check ", "bold"),
        f"last layer vs llama.cpp's logits: max |Δ| {check['max_abs_diff']:.3f} over the "
        "vocabulary (the head's quantization rounding) · ",
        (f"head: {check['head']}", "grey70"),
        f" · projection {check['ms']:.0f} ms",
    )
    return Group(head, enters, table, foot)


class LensPane(Static):
    """The lens of one decode, or a sentence saying why there is none."""

    def show_lens(self, lv: LensView | None, missing: str | None) -> None:
        if missing is not None:
            self.update(Text(missing, "grey70"))
            return
        if lv is None or lv.step is None:
            status = lv.status if lv is not None else "the lens is not available"
            self.update(Text(status or "no lens yet", "grey70"))
            return
        body = render_lens(lv.step, lv.mode)
        if lv.status:
            body = Group(body, Text(lv.status, "bright_yellow"))
        self.update(body)


class LensTab(VerticalScroll):
    """Tab 8: the lens pane (scrolls: one row per layer)."""

    DEFAULT_CSS = "LensTab > LensPane { height: auto; }"

    def compose(self) -> ComposeResult:
        yield LensPane()

    def show(self, view: Any) -> None:
        missing = view.capabilities.missing("lens")
        pane = self.query_one(LensPane)
        pane.show_lens(
            getattr(view, "lens", None), None if missing is None else f"the logit lens {missing}"
        )
        self.border_title = "logit lens"
        mode = getattr(getattr(view, "lens", None), "mode", "preview")
        self.border_subtitle = f"showing the {MODE_NAMES.get(mode, mode)} · L switches"
