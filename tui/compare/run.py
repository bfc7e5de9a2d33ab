"""One comparison from parsed flags: load what each side needs, feed the text, gather figures.

B shares A's loaded model when the file and its load flags are the same (a second context on
the same weights, as llama-server's slots share them); a B with another file is first opened
with ``vocab_only`` and refused in one sentence if its vocabulary is not A's. A B that differs
from A only in its sampler gets no context at all: teacher-forced, both sides would compute
the same logits, so they share A's.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

from ..engine import EngineConfig, Model, SamplerSettings
from ..engine.errors import TokenstepError
from ..engine.tokens import Vocab
from ..engine.vocab_only import VocabModel
from .free import free_run
from .lockstep import LocalSide, Lockstep, SideSpec, greedy_continuation, same_vocab, spans
from .records import Position, Result, Side
from .sides import LOGIT_FLAGS, labels


def _sampler(ns: argparse.Namespace) -> str:
    if ns.greedy or ns.temp <= 0:
        return "greedy"
    return f"temp {ns.temp} top-k {ns.top_k} top-p {ns.top_p} min-p {ns.min_p} seed {ns.seed}"


def _text(a: argparse.Namespace) -> str:
    from ..args import read_prompt

    ns = copy.copy(a)
    if a.chunks:  # the text may hold many contexts' worth of tokens
        ns.ctx_size = 1 << 20
    return read_prompt(ns)


def run_compare(
    a: argparse.Namespace,
    b: argparse.Namespace,
    configs: tuple[EngineConfig, EngineConfig],
    settings: tuple[SamplerSettings, SamplerSettings],
    differs: tuple[str, ...],
    *,
    on_position: Callable[[Position], None] | None = None,
) -> Result:
    ca, cb = configs
    text = _text(a)
    if a.free and a.chunks:
        raise TokenstepError("--free and --chunks both given: --chunks scores a given text.")
    if a.chunks and a.score_from:
        raise TokenstepError("--score-from and --chunks both given: --chunks scores from -c/2.")
    if b.model != a.model:  # the vocabulary first: no weights are loaded for a refusal
        try:
            vb = VocabModel(b.model)
        except TokenstepError as exc:
            raise TokenstepError(f"B's model (after --vs): {exc}") from None
        try:
            va = VocabModel(a.model)
            why = same_vocab(va.vocab, vb.vocab)
            va.close()
        finally:
            vb.close()
        if why:
            raise TokenstepError(
                f"B's model {b.model} cannot be compared with A's: {why}; KL needs the same "
                "vocabulary on both sides."
            )
    model_a = Model(a.model, repack_flag=a.repack)
    # Only a sampler change shares A's logits; B identical to A still gets its own context,
    # so a run against itself shows that two contexts compute the same rows.
    # Free-running, each side needs its own context: once the texts part, so do the logits.
    shared = (
        bool(differs) and not a.free and all(getattr(a, d) == getattr(b, d) for d in LOGIT_FLAGS)
    )
    same_file = a.model == b.model and a.repack == b.repack
    model_b = None
    sides: list[LocalSide] = []
    try:
        quants = {a.model: model_a.info.quant}
        if not shared and not same_file:
            model_b = Model(b.model, repack_flag=b.repack)
            quants[b.model] = model_b.info.quant
        side_a = LocalSide(SideSpec("A", (), a.model, ca, a.repack, _sampler(a)), model_a)
        sides.append(side_a)
        side_b = None
        if not shared:
            spec_b = SideSpec("B", differs, b.model, cb, b.repack, _sampler(b))
            side_b = LocalSide(spec_b, model_b or model_a)
            sides.append(side_b)
        fa = side_a.context.flash_attn_resolved
        fa_b = side_b.context.flash_attn_resolved if side_b is not None else fa
        la, lb = labels(a, b, ca, cb, lambda m: quants.get(m, "?"), same_fa=fa == fa_b)
        side_a.spec.label = la
        if side_b is not None:
            side_b.spec.label = lb
        vocab: Vocab = side_a.vocab
        tokens = vocab.tokenize(text, add_special=True)
        if a.free:
            assert side_b is not None

            def describe() -> tuple[Side, Side]:
                return side_a.describe(), side_b.describe()

            n = a.n_predict or 32
            return free_run(side_a, side_b, tokens, n, settings, describe, on_position)
        if a.n_predict > 0:
            tokens = greedy_continuation(side_a, tokens, a.n_predict)
        bos = model_a.info.bos if model_a.info.add_bos else None
        run = Lockstep(side_a, side_b, on_position=on_position)
        for span in spans(
            tokens, side_a.context.n_ctx, chunks=a.chunks, bos=bos, score_from=a.score_from
        ):
            run.run_span(span)
        desc_a = side_a.describe()
        if side_b is not None:
            desc_b = side_b.describe()
        else:
            from dataclasses import replace

            desc_b = replace(desc_a, label=lb, differs=differs, sampler=_sampler(b))
        return run.result(tokens, desc_a, desc_b)
    finally:
        for s in sides:
            s.free()
        if model_b is not None:
            model_b.close()
        model_a.close()
