"""Decode anatomy pane: what one ``llama_decode`` computes, for the model that is loaded.

embedding -> n_layer × (attention + feed-forward) -> final norm -> lm_head -> logits, with the
model's real sizes, the graph's node count and each layer's named operations (the census of
:mod:`tui.engine.observe.census`) and, in profile mode, the measured time of every part. The
app calls ``update_from(info, census=None, profile=None, status="")`` (the census and profile
as a record's ``extras`` dicts or as their objects) or ``show_unavailable(sentence)`` when the
backend cannot give the graph. The pane scrolls when the profile is taller than the screen.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..engine.model.model import ModelInfo
from ..engine.observe.profile import PROFILE_NOTE

TITLE = Style(color="bright_white", bold=True)
STAGE = Style(color="bright_cyan", bold=True)
NAME = Style(color="#e9c46a")
ARROW = Style(color="grey42")
DIM = Style(color="grey50")
SIZE = Style(color="bright_green")
SLOW = Style(color="bright_red", bold=True)
ATTN_BAR = Style(color="#2a9d8f")
FFN_BAR = Style(color="#e9c46a")
STAGE_W = 12

Line = list[Segment]


def _as_dict(x: Any) -> dict[str, Any] | None:
    if x is None:
        return None
    if isinstance(x, Mapping):
        return dict(x)
    return dict(x.to_dict())


def _split_chain(chain: list[str]) -> tuple[list[str], list[str]]:
    """Attention part up to and including ``ffn_inp`` (the residual add), then the FFN part."""
    if "ffn_inp" in chain:
        i = chain.index("ffn_inp") + 1
        return chain[:i], chain[i:]
    return chain, []


class AnatomyPane(ScrollView, can_focus=True):
    """embedding → n_layer × (attention + FFN) → norm → lm_head, with real sizes and times."""

    DEFAULT_CSS = """
    AnatomyPane { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.info: ModelInfo | None = None
        self.census: dict[str, Any] | None = None
        self.profile: dict[str, Any] | None = None
        self.status = ""
        self.lines: list[Line] = []

    def update_from(
        self,
        info: ModelInfo,
        census: Mapping[str, Any] | Any | None = None,
        profile: Mapping[str, Any] | Any | None = None,
        *,
        status: str = "",
    ) -> None:
        self.info = info
        self.census = _as_dict(census)
        self.profile = _as_dict(profile)
        self.status = status
        self._rebuild()

    def show_unavailable(self, sentence: str) -> None:
        """Nothing to draw (the backend has no compute graph to show): only ``sentence``."""
        self.info = self.census = self.profile = None
        self.status = sentence
        self.border_title = "decode anatomy"
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    @property
    def timings_shown(self) -> bool:
        """Snapshot tests turn measured times off (the app's ``show_timings``)."""
        try:
            return bool(getattr(self.app, "show_timings", True))
        except Exception:  # not mounted
            return True

    def _ms(self, ms: float) -> str:
        return f"{ms:8.3f} ms" if self.timings_shown else "   –.– ms"

    # -- content ---------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        if self.info is not None:
            self.lines = self._build()
        else:  # no model info: only the status (show_unavailable), if any
            self.lines = [[Segment(self.status, DIM)]] if self.status else []
        self.virtual_size = Size(self.size.width, len(self.lines))
        i = self.info
        if i is not None:
            self.border_title = f"decode anatomy · {i.name} · {i.arch} {i.quant}"
        subtitle = []
        if self.census:
            subtitle.append(
                f"{self.census['n_nodes']:,} graph nodes per ubatch · "
                f"{self.census['n_graphs']} graph(s) in the last decode"
            )
        if self.profile:
            subtitle.append("PROFILE MODE: slower")
        if self.status:
            subtitle.append(self.status)
        self.border_subtitle = " · ".join(subtitle)
        self.refresh()

    def _stage(self, name: str, parts: Line, ms: float | None = None) -> Line:
        line = [Segment(f"{name:<{STAGE_W}}", STAGE), *parts]
        if ms is not None:
            used = sum(s.cell_length for s in line)
            pad = max(1, self.size.width - used - 12)
            line += [Segment(" " * pad), Segment(self._ms(ms), DIM)]
        return line

    def _chain(self, names: list[str]) -> Line:
        out: Line = []
        for k, n in enumerate(names):
            if k:
                out.append(Segment(" → ", ARROW))
            out.append(Segment(n, NAME))
        return out

    def _build(self) -> list[Line]:
        i = self.info
        assert i is not None
        c, p = self.census, self.profile
        group = i.n_head // i.n_head_kv if i.n_head_kv else 0
        lines: list[Line] = []
        if c:
            lines.append([
                Segment("one llama_decode = ", DIM),
                Segment(f"{c['n_nodes']:,}", SIZE),
                Segment(" graph nodes", DIM),
                Segment(f" ({c['n_graphs']} ubatch graph{'s' if c['n_graphs'] != 1 else ''})", DIM),
            ])  # fmt: skip
        else:
            lines.append([Segment("graph census off: sizes from the model only", DIM)])
        lines.append(
            [Segment("tokens", TITLE), Segment("  (one id per position in the batch)", DIM)]
        )
        lines.append([Segment("  ▼", ARROW)])
        prologue = ", ".join(c["prologue"]) if c else "token_embd lookup"
        lines.append(
            self._stage(
                "embedding",
                [Segment(f"{i.n_vocab:,} × {i.n_embd}", SIZE), Segment(f"  {prologue}", NAME)],
                p["prologue_ms"] if p else None,
            )
        )
        lines.append([Segment("  ▼", ARROW)])
        per_layer = (
            f"  {c['nodes_per_layer'][0]} nodes per layer" if c and c["nodes_per_layer"] else ""
        )
        lines.append([
            Segment(f"{i.n_layer} × block", TITLE),
            Segment(f"  residual stream of {i.n_embd}", DIM),
            Segment(per_layer, DIM),
        ])  # fmt: skip
        attn, ffn = _split_chain(c["layer_chain"]) if c else ([], [])
        attn_ms = sum(p["attention_ms"]) if p else None
        ffn_ms = sum(p["ffn_ms"]) if p else None
        lines.append(
            self._stage(
                "│ attention",
                [
                    Segment(
                        f"{i.n_head} query heads, {i.n_head_kv} KV heads × {i.head_dim_k}", SIZE
                    ),
                    Segment(
                        f"  (GQA: {group} query heads share a KV head)" if group > 1 else "", DIM
                    ),
                ],
                attn_ms,
            )
        )
        if attn:
            lines.append([Segment("│" + " " * (STAGE_W - 1)), *self._chain(attn)])
        lines.append(
            self._stage(
                "│ FFN",
                [Segment(f"{i.n_embd} → {i.n_ff:,} → {i.n_embd}", SIZE)],
                ffn_ms,
            )
        )
        if ffn:
            lines.append([Segment("│" + " " * (STAGE_W - 1)), *self._chain(ffn)])
        if c and not c.get("same_chain_every_layer", True):
            lines.append([Segment("│ (some layers name their nodes differently)", DIM)])
        lines.append([Segment("  ▼", ARROW)])
        epi = dict(p["epilogue_ms"]) if p else {}
        norm_ms = (epi.get("norm", 0.0) + epi.get("result_norm", 0.0)) if p else None
        lines.append(
            self._stage(
                "norm", [Segment(f"{i.n_embd}", SIZE), Segment("  result_norm", NAME)], norm_ms
            )
        )
        lines.append([Segment("  ▼", ARROW)])
        lines.append(
            self._stage(
                "lm_head",
                [Segment(f"{i.n_embd} → {i.n_vocab:,}", SIZE), Segment("  result_output", NAME)],
                epi.get("result_output") if p else None,
            )
        )
        lines.append([Segment("  ▼", ARROW)])
        lines.append([Segment("logits", TITLE), Segment(f"  {i.n_vocab:,} per output token", DIM)])
        if c:
            ops = " · ".join(f"{k} {v}" for k, v in list(c["ops"].items())[:8])
            lines.append([])
            lines.append([Segment("ops  ", DIM), Segment(ops, NAME)])
        if p:
            lines += self._profile_lines(p)
        return lines

    def _profile_lines(self, p: dict[str, Any]) -> list[Line]:
        total = float(p["total_ms"]) or 1.0
        epi = dict(p["epilogue_ms"])
        parts = [
            ("embedding", float(p["prologue_ms"])),
            ("attention", float(sum(p["attention_ms"]))),
            ("FFN", float(sum(p["ffn_ms"]))),
            ("norm+lm_head", float(sum(epi.values()))),
        ]
        out: list[Line] = [
            [],
            *(
                [Segment("PROFILE " if k == 0 else " " * 8, SLOW), Segment(part, DIM)]
                for k, part in enumerate(textwrap.wrap(PROFILE_NOTE, max(20, self.size.width - 9)))
            ),
            [
                Segment("where the time went: ", DIM),
                Segment(
                    " · ".join(
                        f"{n} {100 * ms / total:.0f}%" if self.timings_shown else f"{n} –%"
                        for n, ms in parts
                    ),
                    TITLE,
                ),
                Segment(f"   total {self._ms(total).strip()}", DIM),
            ],
        ]
        attn, ffn = p["attention_ms"], p["ffn_ms"]
        top = max([*attn, *ffn, 1e-9])
        bar_w = max(4, (self.size.width - 40) // 2)
        for layer, (a, f) in enumerate(zip(attn, ffn, strict=True)):
            na = max(1, round(bar_w * a / top)) if self.timings_shown else 1
            nf = max(1, round(bar_w * f / top)) if self.timings_shown else 1
            out.append(
                [
                    Segment(f"  layer {layer:>3} ", DIM),
                    Segment("attn ", DIM),
                    Segment(f"{'█' * na:<{bar_w}}", ATTN_BAR),
                    Segment(" ffn ", DIM),
                    Segment(f"{'█' * nf:<{bar_w}}", FFN_BAR),
                    Segment(f" {a:.2f}+{f:.2f} ms" if self.timings_shown else " –.–+–.– ms", DIM),
                ]
            )
        if p.get("slowest"):
            out.append([Segment("slowest nodes: ", DIM)])
            for name, op, ms in p["slowest"][:5]:
                out.append(
                    [
                        Segment(f"  {name:<22}", NAME),
                        Segment(f"{op:<10}", DIM),
                        Segment(self._ms(ms), DIM),
                    ]
                )
        return out

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        row = int(self.scroll_offset.y) + y
        segs = self.lines[row] if row < len(self.lines) else []
        strip = Strip(segs).crop(0, width).extend_cell_length(width)
        return strip.apply_style(self.rich_style)
