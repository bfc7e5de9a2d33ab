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
from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import Vocab
from ..engine.model.vocab_only import VocabModel
from . import kld_base
from .free import free_run
from .lockstep import (
    LocalSide,
    Lockstep,
    RowSource,
    SideSpec,
    greedy_continuation,
    n_compared,
    same_vocab,
    spans,
)
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
    on_total: Callable[[int], None] = lambda n: None,
) -> Result:
    """``on_total`` hears, once, how many positions the run will compare (before the first;
    in free mode the most it can, as a side may end its text early)."""
    ca, cb = configs
    if a.kld_base and (a.free or b.server):
        raise TokenstepError("--kld-base keeps A's rows of a teacher-forced, local comparison.")
    if kld_base.exists(a.kld_base):
        return _from_base(a, b, cb, differs, on_position, on_total)
    text = _text(a)
    if b.server and a.free:
        raise TokenstepError("--free with a remote B: the server samples with its own chain.")
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
        if not shared and not same_file and not b.server:
            model_b = Model(b.model, repack_flag=b.repack)
            quants[b.model] = model_b.info.quant
        side_a = LocalSide(SideSpec("A", (), a.model, ca, a.repack, _sampler(a)), model_a)
        sides.append(side_a)
        side_b = None
        if not shared and not b.server:
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
        if b.server:
            return _remote(a, b, side_a, tokens, lb, differs, on_position, on_total)
        if a.free:
            assert side_b is not None

            def describe() -> tuple[Side, Side]:
                return side_a.describe(), side_b.describe()

            n = a.n_predict or 32
            on_total(n)
            return free_run(side_a, side_b, tokens, n, settings, describe, on_position)
        if a.n_predict > 0:
            tokens = greedy_continuation(side_a, tokens, a.n_predict)
        bos = model_a.info.bos if model_a.info.add_bos else None
        source: RowSource = side_a
        if a.kld_base:
            source = writer = kld_base.BaseWriter(
                a.kld_base,
                side_a,
                kld_base.header(
                    side_a,
                    tokens,
                    chunks=a.chunks,
                    score_from=a.score_from,
                    bos=bos,
                    described=side_a.describe(),
                ),
            )
        run = Lockstep(source, side_b, on_position=on_position)
        try:
            todo = spans(
                tokens, side_a.context.n_ctx, chunks=a.chunks, bos=bos, score_from=a.score_from
            )
            on_total(n_compared(todo))
            for span in todo:
                run.run_span(span)
        finally:
            if a.kld_base:
                writer.close()
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


def _remote(
    a: argparse.Namespace,
    b: argparse.Namespace,
    side_a: LocalSide,
    tokens: list[int],
    label: str,
    differs: tuple[str, ...],
    on_position: Callable[[Position], None] | None,
    on_total: Callable[[int], None],
) -> Result:
    """Teacher-forced against llama-server: A's rows against the server's top K."""
    from .remote import RemoteSide, run_remote_span

    remote = RemoteSide(
        b.server,
        side_a.n_vocab,
        n_probs=b.n_probs,
        label=label,
        differs=differs,
        api_key=getattr(b, "api_key", None),
    )
    try:
        run = Lockstep(side_a, None, on_position=on_position)
        bos = side_a.model.info.bos if side_a.model.info.add_bos else None
        n_ctx = side_a.context.n_ctx
        todo = spans(tokens, n_ctx, chunks=a.chunks, bos=bos, score_from=a.score_from)
        on_total(n_compared(todo))
        for span in todo:
            run_remote_span(run, side_a, remote, span)
        result = run.result(tokens, side_a.describe(), remote.describe(n_ctx))
    finally:
        remote.close()
    from dataclasses import replace

    return replace(result, summary=replace(result.summary, kl_is_bound=True, shared_logits=False))


def _from_base(
    a: argparse.Namespace,
    b: argparse.Namespace,
    cb: EngineConfig,
    differs: tuple[str, ...],
    on_position: Callable[[Position], None] | None,
    on_total: Callable[[int], None],
) -> Result:
    """B against A's rows from a base file: the file's tokens, context size and scoring."""
    from dataclasses import replace

    reader = kld_base.BaseReader(a.kld_base)
    try:
        h = reader.header
        if cb.n_ctx != reader.n_ctx:
            raise TokenstepError(
                f"--kld-base {a.kld_base} was written with -c {reader.n_ctx}; B has -c "
                f"{cb.n_ctx}: pass -c {reader.n_ctx}."
            )
        try:
            model_b = Model(b.model, repack_flag=b.repack)
        except TokenstepError as exc:
            raise TokenstepError(f"B's model (after --vs): {exc}") from None
        side_b = None
        try:
            why = same_vocab(reader.vocab, Vocab(model_b.vocab, model_b.info.n_vocab))
            if why:
                raise TokenstepError(
                    f"B's model {b.model} cannot be compared with the base's: {why}."
                )
            side_b = LocalSide(SideSpec("B", differs, b.model, cb, b.repack, _sampler(b)), model_b)
            run = Lockstep(reader, side_b, on_position=on_position)
            todo = spans(
                reader.tokens,
                reader.n_ctx,
                chunks=bool(h["chunks"]),
                bos=h.get("bos"),
                score_from=int(h["score_from"]),
            )
            on_total(n_compared(todo))
            for span in todo:
                run.run_span(span)
            desc_b = replace(side_b.describe(), label="B: " + (", ".join(differs) or "same as A"))
            return run.result(reader.tokens, reader.side, desc_b)
        finally:
            if side_b is not None:
                side_b.free()
            model_b.close()
    finally:
        reader.close()
