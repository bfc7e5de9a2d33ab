"""The tour's chapters about attention and the KV cache: the causal mask seen in the model's
own weights (and, in the same prefill, the logit lens), the quadratic wall counted, the
cache's bytes taken apart, a full context, and the prefix a second turn reuses. Each function
runs on a context the lab made for it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import Engine, EngineConfig, Model, SamplerSettings
from ..engine.model.chat_template import CHATML, Message, chat_tokens
from ..engine.model.tokens import display_bytes
from ..engine.observe.memory import KVBreakdown, allocations, breakdown_for

FULL_CTX = 32  # the small context the "context fills" chapter fills
WALL_N = 16  # tokens the quadratic-wall chapter feeds one at a time
BIG_CTX = 8192
# The larger model of the RAM chapter, typed in as sizes: the shape of an 8B Llama-3 (32
# layers, 32 query heads sharing 8 K/V heads of 128 values).
BIG = KVBreakdown(n_layer=32, n_head=32, n_head_kv=8, head_dim_k=128, head_dim_v=128)
INSIDE_LAYER_FRACTION = 0.5  # the chapter shows the middle layer


def _piece(eng: Engine, token: int) -> str:
    return display_bytes(eng.vocab.piece(token))


def next_not_eog(eng: Engine) -> int:
    """The highest logit that does not end generation (the tour keeps going to count)."""
    logits = eng.logits
    assert logits is not None
    for t in np.argsort(-logits, kind="stable")[:64]:
        if not eng.vocab.is_eog(int(t)):
            return int(t)
    return int(np.argmax(logits))


@dataclass(frozen=True)
class LensFacts:
    """The logit lens on the prompt's last position: where llama.cpp's own top-1 first shows
    (layers 0-based, as ``tokenstep trace --lens`` counts them)."""

    n_layer: int
    top1: int  # llama.cpp's top-1 token id
    top1_piece: str
    top5_layer: int  # the first layer whose lens has it among its 5 highest
    top1_layer: int | None  # ... and the first where it is the highest
    max_abs_diff: float  # the last layer's lens against llama.cpp's logits
    rounding_bound: float | None  # what the head's 8-bit activation rounding can move a logit
    head: str  # how the head projects (LensHead.describe)
    head_load_ms: float | None  # the one-time read of the head from the GGUF file


@dataclass(frozen=True)
class InsideFacts:
    n_tokens: int
    allowed: int  # mask cells a query may look at (on or below the diagonal)
    masked: int
    layer: int
    n_head: int
    above_diagonal: float  # the largest weight the model gave a future position
    row_sum_err: float  # the largest |Σ row - 1| over rows and heads
    last_piece: str
    top_piece: str  # the key the last row weights most (mean over heads)
    top_weight: float
    lens: LensFacts | None = None
    lens_skip: str = ""  # why there is no lens (the head cannot be read, ...)


def _lens(check: dict[str, Any] | None, problems: list[str], n_layer: int) -> LensFacts | str:
    if check is None:
        return problems[0] if problems else "the prefill gave the lens no row"
    if check["top5_layer"] is None:  # the head's rounding moved the top-1 out of every top 5
        return "llama.cpp's top-1 is in no layer's top 5 of the lens"
    return LensFacts(
        n_layer,
        int(check["top1"]["id"]),
        str(check["top1"]["piece"]),
        int(check["top5_layer"]),
        check["top1_layer"],
        float(check["max_abs_diff"]),
        check.get("rounding_bound"),
        str(check["head"]),
        check.get("head_load_ms"),
    )


def inside_facts(model: Model, config: EngineConfig, prompt: str) -> InsideFacts:
    """One prefill with the softmax of one layer copied out of the graph, and, on the same
    eval callback, every layer's ``l_out`` row of the last position for the logit lens (the
    head is read from the GGUF file once per model: about 1 s on SmolLM2, part of this
    chapter's "running" time)."""
    from ..engine.model.lens import head_problem
    from ..engine.observe.attention_map import context_attention, top_attended
    from ..engine.observe.lens_capture import AttentionLensCapture

    n_layer = model.info.n_layer
    layer = int(n_layer * INSIDE_LAYER_FRACTION)
    problem = head_problem(model.header)
    cap = AttentionLensCapture(n_layer=n_layer, layers=[layer], lens=problem is None)
    with Engine(model, config, SamplerSettings(temp=0.0), observers=[cap]) as eng:
        ids = eng.vocab.tokenize(prompt)
        recs = eng.prefill(ids)
        extras = recs[-1].extras if recs else {}
        lens = problem or _lens(extras.get("lens_check"), extras.get("lens_problems", []), n_layer)
        att = context_attention(eng, layer)
        assert att is not None
        w = att.weights.astype(np.float64)  # (n_head, n, n)
        n = len(ids)
        upper = np.triu(np.ones((n, n), dtype=bool), k=1)
        above = float(np.abs(w[:, upper]).max()) if n > 1 else 0.0
        err = float(np.abs(w.sum(axis=2) - 1.0).max())
        ((col, weight),) = top_attended(att.row(n - 1, None), 1)
        return InsideFacts(
            n,
            n * (n + 1) // 2,
            n * (n - 1) // 2,
            layer,
            att.n_head,
            above,
            err,
            _piece(eng, ids[-1]),
            _piece(eng, ids[col]),
            weight,
            lens if isinstance(lens, LensFacts) else None,
            lens if isinstance(lens, str) else "",
        )


@dataclass(frozen=True)
class WallFacts:
    n: int
    with_cache: int  # token-forward passes the run did
    without_cache: int  # ... and a loop without a cache would have done, counted per call
    series: tuple[tuple[int, int, int], ...]  # (context, with, without) after each call
    step_ms: tuple[float, ...]  # each one-token decode's time

    @property
    def formula(self) -> int:
        return self.n * (self.n + 1) // 2


def wall_facts(eng: Engine, ids: list[int]) -> WallFacts:
    """Feed WALL_N tokens one call each: the prompt, then greedy picks."""
    eng.prefill(ids[:1])
    for t in ids[1:WALL_N]:
        eng.prefill([t])
    while eng.n_past < WALL_N:
        eng.step(force=next_not_eog(eng))
    pts = eng.work.points
    return WallFacts(
        eng.n_past,
        eng.work.with_cache,
        eng.work.without_cache,
        tuple((p.context, p.with_cache, p.without_cache) for p in pts),
        tuple(p.decode_ms for p in pts),
    )


@dataclass(frozen=True)
class CacheCheck:
    kind: str
    cells: int
    layers: int
    ours_mib: float
    logged_mib: float
    agrees: bool


@dataclass(frozen=True)
class RamFacts:
    name: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    type_k: str
    type_v: str
    k_row: int  # bytes of one token's K in one layer
    v_row: int
    bytes_per_token: int
    mha_bytes_per_token: int  # if every query head had its own K/V head
    caches: tuple[CacheCheck, ...]  # what llama.cpp logged beside our arithmetic (none: header)
    big_bytes_per_token: int
    big_ctx: int

    @property
    def big_total(self) -> int:
        return self.big_bytes_per_token * self.big_ctx


def _ram(name: str, bd: KVBreakdown, caches: tuple[CacheCheck, ...]) -> RamFacts:
    return RamFacts(
        name,
        bd.n_layer,
        bd.n_head,
        bd.n_head_kv,
        bd.head_dim_k,
        bd.head_dim_v,
        bd.type_k,
        bd.type_v,
        bd.k_row_bytes,
        bd.v_row_bytes,
        bd.bytes_per_token,
        bd.mha_bytes_per_token,
        caches,
        BIG.bytes_per_token,
        BIG_CTX,
    )


def ram_facts(eng: Engine) -> RamFacts:
    mib = float(1 << 20)
    caches = tuple(
        CacheCheck(c.kind, c.cells, c.layers, c.bytes / mib, c.logged_mib, c.agrees)
        for c in allocations(eng)
    )
    return _ram(eng.info.name, breakdown_for(eng), caches)


def ram_from_header(path: str | Path | None) -> RamFacts:
    """The same arithmetic on the GGUF header alone (no context: nothing logged to compare)."""
    from ..engine.model import gguf_header
    from ..engine.model.info import facts
    from ..engine.model.model import default_model_path

    f = facts(gguf_header.validate(Path(path) if path else default_model_path()))
    bd = KVBreakdown(f.n_layer, f.n_head, max(f.n_head_kv), f.head_dim_k, f.head_dim_v)
    return _ram(f.name, bd, ())


@dataclass(frozen=True)
class FullFacts:
    n_ctx: int
    stop_reason: str  # --context-full stop: what the engine said
    stop_at: int  # tokens in the context when it stopped
    n_past: int  # --context-full shift: tokens before the shift
    n_keep: int
    n_discard: int
    forgotten: tuple[str, ...]  # the pieces the shift dropped
    after: int  # tokens in the context after the shift and the next decode


def _fill(eng: Engine, ids: list[int]) -> None:
    eng.prefill(ids[: eng.n_ctx - 1])
    for _ in range(2 * eng.n_ctx):
        if eng.shifts or eng.stop_reason:
            return
        if eng.step(force=next_not_eog(eng)) is None and eng.stop_reason:
            return


def full_facts(eng: Engine, ids: list[int]) -> FullFacts:
    """Fill a FULL_CTX context twice: once stopping (a context of its own), once shifting."""
    cfg = dataclasses.replace(eng.config, context_full="stop")
    with Engine(eng.model, cfg, SamplerSettings(temp=0.0)) as stop:
        _fill(stop, ids)
        reason, stop_at = stop.stop_reason or "", stop.n_past
    _fill(eng, ids)
    ev = eng.shifts[0]
    return FullFacts(
        eng.n_ctx,
        reason,
        stop_at,
        ev.n_past,
        ev.n_keep,
        ev.n_discard,
        tuple(_piece(eng, f.token) for f in ev.forgotten),
        eng.n_past,
    )


@dataclass(frozen=True)
class PrefixFacts:
    first_tokens: int  # the first turn's prompt
    reply_tokens: int
    second_tokens: int  # the second turn's whole prompt (history included)
    reused: int  # found in the cache
    computed: int  # decoded
    first_ms: float
    second_ms: float


REPLY_N = 6


def prefix_facts(eng: Engine, message: str) -> PrefixFacts:
    """Two chat turns in one context: the second prompt repeats the first and the reply."""
    template = eng.info.chat_template or CHATML
    first = chat_tokens(eng.vocab, template, [Message("user", message)]).tokens
    eng.sync_prompt(first)
    reply: list[int] = []
    for _ in range(REPLY_N):
        tok = next_not_eog(eng)
        reply.append(tok)
        eng.step(force=tok)
    history = [
        Message("user", message),
        Message("assistant", eng.vocab.text(reply), tuple(reply)),
        Message("user", message),
    ]
    second = chat_tokens(eng.vocab, template, history).tokens
    eng.sync_prompt(second)
    t1, t2 = eng.turns[0], eng.turns[-1]
    return PrefixFacts(
        len(first), len(reply), len(second), t2.reused, t2.computed, t1.prefill_ms, t2.prefill_ms
    )
