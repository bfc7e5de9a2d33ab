"""The logit lens's capture: the row being predicted, after every layer, from the graph.

Each layer ends with ``l_out-N`` (ne = [n_embd, n_rows]), the residual after layer N. While
the lens is on, :class:`LensCapture` copies its last row, the predicted position (llama.cpp
keeps only output rows in the last layer). After the decode it projects all layers at once
(:mod:`tui.engine.model.lens`) into ``extras["lens"]`` (per layer) and ``extras["lens_check"]``
(the pick's first top-1 and top-5 layers, the last layer's max |Δ| against llama.cpp's logits,
the projection's ms). A context has one eval callback, so the lens rides on the
:class:`GraphTap`: :class:`LensCapture`, or :class:`AttentionLensCapture` with attention.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.lens import LensHead, lens_figures, load_head, pick_figures
from ..model.tokens import display_bytes
from ..run.logits import read_row
from .attention_capture import AttentionCapture
from .graph_tap import GraphTap
from .lens_grid import grid_figures
from .tensor import read_last_row, read_tensor

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..run.backend import LocalSession
    from ..run.batch import DecodeCall
    from ..run.parts import ObservedParts
    from ..run.step import StepRecord

LOUT_NODE = "l_out-{}"


class LensCapture(GraphTap):
    """A :class:`GraphTap` that also captures ``l_out-N`` of the predicted row for every
    layer while :attr:`lens_on` (:meth:`set_lens`); the callback stays installed when off.

    Keyword arguments besides ``lens`` go to the next class (GraphTap, or AttentionCapture in
    :class:`AttentionLensCapture`)."""

    # The lens's node names join whatever the tap wants (AttentionCapture reassigns
    # ``wanted`` when its layers change): ``wanted`` is the union, kept precomputed because
    # the ask phase tests every node against it.
    _lens_wanted: frozenset[bytes] = frozenset()
    _wanted_base: set[bytes] = set()
    _wanted_all: set[bytes] = set()

    def __init__(self, *, lens: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lout = {LOUT_NODE.format(i).encode(): i for i in range(self.n_layer)}
        self.lens_on = False
        self._rows: dict[int, tuple[int, np.ndarray]] = {}
        self._lens_head: LensHead | None = None
        self.head_load_ms: float | None = None  # the one-time head read (None: not read yet)
        self._load_reported = False
        self._last: tuple[DecodeCall, np.ndarray] | None = None  # the newest decode's lens logits
        self.grid_on = False  # copy each l_out whole: the position x layer grid (lens_grid.py)
        self._grid: dict[int, dict[int, np.ndarray]] = {}  # layer -> ubatch -> (rows, n_embd)
        self.lens_errors: list[str] = []
        self.set_lens(lens)

    @property  # type: ignore[override]
    def wanted(self) -> set[bytes]:
        return self._wanted_all

    @wanted.setter
    def wanted(self, names: set[bytes]) -> None:
        self._wanted_base = set(names)
        self._wanted_all = self._wanted_base | self._lens_wanted

    def set_grid(self, on: bool) -> None:
        """The grid over every position of each decode (it turns the lens on with it)."""
        self.grid_on = on
        if on:
            self.set_lens(True)

    def set_lens(self, on: bool) -> None:
        self.lens_on = on
        self._lens_wanted = frozenset(self._lout) if on else frozenset()
        self.wanted = self._wanted_base

    def use_head(self, head: LensHead) -> None:
        """A head another capture of the same model already read (an observer context made
        anew keeps it: about 1 s and 113 MB on SmolLM2)."""
        self._lens_head = head

    @property
    def head(self) -> LensHead | None:
        return self._lens_head

    def lens_head(
        self, engine: ObservedParts, progress: Callable[[int, int], None] | None = None
    ) -> LensHead:
        """The model's head as float32, read from the GGUF file on first use and dequantized
        (SmolLM2's 49,152 x 576 Q8_0 matrix: 113 MB as float32, about 1 s here). ``trace``
        reads it before the first decode; :attr:`head_load_ms` says how long it took, and the
        first lens record reports it as ``lens_check["head_load_ms"]``, apart from every
        ``decode_ms`` and projection ``ms``. ``progress`` is told the matrix's bytes read of
        its total while it is read (see :func:`~tui.engine.model.lens.load_head`)."""
        if self._lens_head is None:
            t0 = time.perf_counter()
            self._lens_head = load_head(str(engine.model.path), progress)
            self.head_load_ms = (time.perf_counter() - t0) * 1000.0
        return self._lens_head

    # -- GraphTap hooks --------------------------------------------------------------------------
    def before_decode(self, engine: ObservedParts, call: DecodeCall) -> None:
        super().before_decode(engine, call)
        self._rows = {}
        self._grid = {}
        self._last = None

    def note_pick(self, engine: LocalSession, rec: StepRecord) -> bool:
        """Once the token generated from ``rec``'s logits is known (sampled or forced), add
        its per-layer rank and p to ``rec``'s lens (:func:`tui.engine.model.lens.pick_figures`).
        Only for the newest decode, whose lens logits are kept until the next one (one
        n_layer x n_vocab float32 array: 5.9 MB on SmolLM2); False when that is not ``rec``."""
        last = self._last
        if last is None or last[0] is not rec.call or rec.sampled is None:
            return False
        if "lens" not in rec.extras:
            return False
        piece = display_bytes(engine.vocab.piece(rec.sampled))
        pick_figures(
            last[1],
            rec.extras["lens"],
            rec.extras["lens_check"],
            rec.sampled,
            piece,
            forced=rec.forced,
        )
        return True

    def on_data(self, name: bytes, ptr: int, graph: int) -> None:
        layer = self._lout.get(name) if self.lens_on else None
        if layer is None or name in self._wanted_base:  # asked for by name too: copy it whole
            super().on_data(name, ptr, graph)
        if layer is None:
            return
        if self.grid_on:
            whole = read_tensor(ptr)
            whole = whole.reshape(-1, whole.shape[-1])
            self._grid.setdefault(layer, {})[graph] = whole
            if whole.shape[0]:
                self._rows[layer] = (graph, whole[-1].copy())
            return
        row = read_last_row(ptr)
        if row is not None:  # a later ubatch's row replaces an earlier one's
            self._rows[layer] = (graph, row)

    def after_decode(self, engine: ObservedParts, call: DecodeCall, extras: dict[str, Any]) -> None:
        super().after_decode(engine, call, extras)
        if self.grid_on and call.tokens:
            self._add_grid(engine, call, extras)
        if not self.lens_on or not call.tokens or not call.tokens[-1].logits:
            return
        problem = self._problem(call)
        if problem is not None:
            extras["lens_problems"] = [problem]
            return
        rows = np.stack([self._rows[i][1] for i in range(self.n_layer)])
        head = self.lens_head(engine)  # read once; not part of the projection's time
        t0 = time.perf_counter()
        final = read_row(engine.ctx, -1, engine.info.n_vocab)
        layers, summary, logits = lens_figures(head, rows, final, engine.vocab)
        self._last = (call, logits)  # until the next decode: for the pick (note_pick)
        summary["ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
        summary["pos"] = call.tokens[-1].pos
        if not self._load_reported and self.head_load_ms is not None:
            summary["head_load_ms"] = round(self.head_load_ms, 3)
            self._load_reported = True
        extras["lens"] = layers
        extras["lens_check"] = summary

    def _add_grid(self, engine: ObservedParts, call: DecodeCall, extras: dict[str, Any]) -> None:
        if self._skipped:
            extras["lens_problems"] = [
                "lens grid not captured: it would exceed the capture memory limit"
            ]
            return
        if len({s for t in call.tokens for s in t.seq_ids}) > 1:
            extras["lens_problems"] = [
                "the lens grid follows one sequence; this decode had several"
            ]
            return
        head = self.lens_head(engine)
        extras["lens_grid"] = grid_figures(
            head, call, self._grid, self.n_layer, engine.ctx, engine.vocab
        )
        self._grid = {}

    def _problem(self, call: DecodeCall) -> str | None:
        """Why this decode's rows cannot be projected, or None."""
        if self._skipped:
            return "lens not captured: it would exceed the capture memory limit"
        missing = [i for i in range(self.n_layer) if i not in self._rows]
        if missing:
            return f"the graph had no node {LOUT_NODE.format(missing[0])} with rows"
        if len({s for t in call.tokens if t.logits for s in t.seq_ids}) > 1:
            return "the lens follows one sequence; this decode stepped several (a fork)"
        last = len(call.ubatches) - 1
        if any(g != last for g, _ in self._rows.values()):
            return "the l_out rows did not all come from the ubatch with the logits"
        return None


class AttentionLensCapture(LensCapture, AttentionCapture):
    """Attention capture and the lens on one eval callback: ``AttentionLensCapture(
    n_layer=..., layers=[...], lens=True)``."""


def find_lens(engine: LocalSession) -> LensCapture | None:
    """The engine's lens capture among its decode observers, or None."""
    for obs in getattr(engine, "observers", ()):
        if isinstance(obs, LensCapture):
            return obs
    return None
