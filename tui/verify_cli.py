"""``tokenstep verify``: generate, and after every step recompute the whole context from
scratch in a fresh ``llama_context`` and compare its logits with the cached step's."""

from __future__ import annotations

import argparse
import sys

from .args import read_prompt
from .engine import TokenstepError
from .engine.model.tokens import display_bytes
from .engine.run.backend import Backend
from .engine.run.step import StepRecord
from .engine.run.verify import VerifyResult
from .engine.speculative.spec_verify import Speculator
from .spec_flags import check_spec, speculator_from_args
from .trace_cli import (
    _safe,
    config_from_args,
    engine_from_args,
    generate_records,
    prompt_tokens,
    settings_from_args,
)


def spec_summary(spec: Speculator) -> str:
    """Drafted and accepted tokens (llama-server's draft_n, draft_n_accepted) and decodes."""
    st = spec.stats
    acc = f" ({st.acceptance:.0%})" if st.acceptance is not None else ""
    per = f"{st.tokens_per_decode:.2f}" if st.tokens_per_decode is not None else "-"
    return (
        f"{st.drafted} drafted, {st.accepted} accepted{acc}; {st.rounds} verify decodes and "
        f"{st.plain} one-token decodes emitted {st.emitted} tokens ({per} per llama_decode)"
    )


def verify_main(args: argparse.Namespace) -> int:
    """Generate, and after every step recompute the whole context from scratch in a fresh
    context. Exit code 3 when the replay of the engine's own decode calls is not bit-identical
    (or, after a context shift, picks another top-1): then the cache held something its calls do
    not compute. A batched row's top-1 flip is reported, not failed: the batched kernels round
    differently from the one-token steps, by an amount that depends on the CPU's build."""
    if getattr(args, "server", None):
        from .engine.remote.remote import remote_capabilities

        raise TokenstepError(f"verify {remote_capabilities(args.server).missing('verify')}.")
    if args.n_predict < 0:
        raise TokenstepError(f"-n/--n-predict must be 0 or more, not {args.n_predict}.")
    settings_from_args(args)
    config_from_args(args)
    check_spec(args)
    text = read_prompt(args)
    if not text.strip():
        raise TokenstepError("the prompt is empty.")
    backend = engine_from_args(args)
    engine = backend.local
    if engine is None:  # --server is refused above; a backend without a context is too
        backend.close()
        raise TokenstepError(f"verify {backend.capabilities.missing('verify')}.")
    out = sys.stdout
    bad = 0
    flips = 0
    spec = None
    try:
        spec = speculator_from_args(args, engine)
        toks = prompt_tokens(engine, text, chat=args.chat, special=args.special)
        out.write(
            f"verify: {len(toks)} prompt tokens, flash attention {engine.flash_attn_resolved}, "
            f"K {args.cache_type_k} / V {args.cache_type_v}; each row recomputes the whole "
            "context in one fresh llama_context (cleared, nothing re-used)\n"
        )
        out.write(verify_header())
        last = None
        # One row per record with logits, as `trace -n N` prints N records: a record is
        # yielded once the token sampled from it is known and before that token is fed, so
        # the check sees exactly the context the record left.
        for i, rec in enumerate(
            r for r in generate_records(engine, spec, args.n_predict, toks) if r.has_logits
        ):
            res = engine.verify_last("batched")
            last = res
            flips += not res.top1_agree
            out.write(verify_row(engine, i, rec, res))
            out.flush()
        if engine.stop_reason is not None:
            out.write(f"stopped: {engine.stop_reason}\n")
        if last is not None:
            out.write(f"\n{last.explain()}\n")
        if not args.no_replay and engine.n_past:
            rep = engine.verify_last("replay")
            out.write(
                f"replay: the same {rep.n_calls} decode calls the engine made, in a fresh "
                f"context: max |Δ| {rep.max_abs_diff:.3g}"
                f"{' (bit-identical)' if rep.exact else ''}; top-1 "
                f"{'same' if rep.top1_agree else 'DIFFERENT'}.\n"
            )
            # Rotated keys (a shift) are not what a fresh context computes: there only the
            # pick can be held to account. Elsewhere the same calls must give the same bits.
            bad += not rep.top1_agree if rep.shifted else not rep.exact
        w = engine.work
        out.write(
            f"work: {w.with_cache:,} token-forward passes with the cache, "
            f"{w.without_cache:,} without one ({w.ratio:.1f}x)\n"
        )
        if spec is not None:
            out.write(f"spec: {spec.name}, {spec_summary(spec)}\n")
    finally:
        if spec is not None:
            spec.close()
        engine.close()
    if flips:
        out.write(
            f"{flips} batched row(s) picked another top-1 than the cached step, each where the "
            "two leading logits lay closer than twice that row's max |Δ|: the batched "
            "kernels' rounding, not the cache's doing (the replay above is the cache's check).\n"
        )
    if bad:
        print(
            "tokenstep: the replay of the engine's own decode calls did not reproduce the "
            "cached logits: the KV cache holds something its calls do not compute.",
            file=sys.stderr,
        )
        return 3
    return 0


VERIFY_PIECE = 14


def verify_header() -> str:
    return (
        f"{'step':>4} {'ctx':>5} {'generated (id, piece)':<{VERIFY_PIECE + 7}} "
        f"{'top-1 where not it':<{VERIFY_PIECE + 7}} {'max|Δ|':>9} {'mean|Δ|':>9} "
        f"{'top-1':>5} {'top-10':>7} {'ms':>7}\n"
    )


def verify_row(engine: Backend, i: int, rec: StepRecord, res: VerifyResult) -> str:
    """One row of ``verify``: the token generated from this record's logits (the one
    ``trace`` prints as ``sampled``), llama.cpp's top-1 beside it where the sampler picked
    another, then the cached logits against the fresh recomputation (max and mean |Δ|, and
    whether the cached and the fresh top-1 and top-10 agree)."""

    def shown(token: int) -> str:
        return _safe(display_bytes(engine.vocab.piece(token)))[:VERIFY_PIECE]

    tok = rec.sampled
    gen = (
        f"{tok:>6} {shown(tok):<{VERIFY_PIECE}}"
        if tok is not None
        else f"{'-':>6} {'':<{VERIFY_PIECE}}"
    )
    top1 = res.top1_cached
    other = f"{top1:>6} {shown(top1):<{VERIFY_PIECE}}" if tok is not None and tok != top1 else ""
    return (
        f"{i:>4} {res.n_tokens:>5} {gen} {other:<{VERIFY_PIECE + 7}} "
        f"{res.max_abs_diff:>9.3g} {res.mean_abs_diff:>9.3g} "
        f"{'same' if res.top1_agree else 'DIFF':>5} "
        f"{'same' if res.top10_order_agree else f'{res.top10_same_rank}/10':>7} "
        f"{res.recompute_ms:>7.1f}\n"
    )
