"""Speculative decoding on the bundled model: the drafts, the verify decode, the cut of the
rejected tail, and that the text is the target's own (greedy token for token, sampled in
distribution)."""

from __future__ import annotations

import math

import llama_cpp
import pytest

from tests.support.spec import CHAT, COUNT, LIST
from tui.engine import Engine, EngineConfig, SamplerSettings, TokenstepError
from tui.engine.run import loop
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator, generate


def tokens_of(engine: Engine, text: str) -> list[int]:
    return engine.vocab.tokenize(text, add_special=True, parse_special=True)


def plain(engine: Engine, toks: list[int], n: int) -> tuple[list[int], list[dict[int, float]]]:
    """Greedy without speculation: the tokens and, per token, its row's top-10 logits."""
    out, rows = [], []
    for rec in loop.generate(engine, n, toks):
        if rec.sampled is not None:
            out.append(rec.sampled)
            rows.append({c.id: c.logit for c in rec.top})
    return out, rows


def speculative(
    engine: Engine, spec: Speculator, toks: list[int], n: int
) -> tuple[list[int], list[dict[int, float]]]:
    out, rows = [], []
    for rec in generate(engine, spec, n, toks):
        if rec.spec is None:  # the prefill: the first pick
            if rec.sampled is not None:
                out.append(rec.sampled)
                rows.append({c.id: c.logit for c in rec.top})
            continue
        sp = rec.spec
        if not sp.draft:
            out.append(sp.picks[0])
            rows.append({c.id: c.logit for c in rec.top})
            continue
        for i, t in enumerate(sp.picks):
            out.append(t)
            rows.append({c.id: c.logit for c in sp.rows[i].top})
    return out, rows


def assert_same_text(
    a: list[int], rows_a: list[dict[int, float]], b: list[int], rows_b: list[dict[int, float]]
) -> None:
    """Token for token, except where a batched row rounds differently from a one-token
    decode and the top two are within that rounding: there the texts may part (and after
    it they continue from different contexts, so the comparison ends there)."""
    assert len(a) == len(b)
    j = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    if j is None:
        return
    ra, rb = rows_a[j], rows_b[j]
    common = set(ra) & set(rb)
    rounding = max(abs(ra[t] - rb[t]) for t in common)  # the same context, two batch shapes
    x, y = a[j], b[j]
    assert {x, y} <= common
    gap_a, gap_b = ra[x] - ra[y], rb[y] - rb[x]  # each decode's own top-1 over the other's
    assert gap_a >= 0 and gap_b >= 0
    assert gap_a + gap_b <= 2 * rounding, (j, gap_a, gap_b, rounding)


@pytest.fixture
def engines(model):
    made = []

    def make(**settings: object) -> Engine:
        s = SamplerSettings(**{"greedy": True, **settings})  # type: ignore[arg-type]
        eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), s)
        made.append(eng)
        return eng

    yield make
    for e in made:
        e.close()


@pytest.mark.parametrize(
    ("text", "size_n", "size_m"), [(COUNT, 12, 48), (LIST, 3, 8), (CHAT, 2, 4)]
)
def test_ngram_simple_greedy_text_is_the_targets(engines, text, size_n, size_m):
    n = 48
    e1 = engines()
    a, rows_a = plain(e1, tokens_of(e1, text), n)
    e2 = engines()
    spec = Speculator(NgramDrafter(NgramSimple(size_n, size_m)))
    b, rows_b = speculative(e2, spec, tokens_of(e2, text), n)
    assert spec.stats.rounds > 0  # something was drafted and verified
    assert spec.stats.emitted + 1 == len(b)
    assert_same_text(a, rows_a, b, rows_b)
    # After every round the cache holds exactly the accepted tokens, in llama.cpp too.
    assert e2.kv.check(e2.ctx) == []
    mem = llama_cpp.llama_get_memory(e2.ctx)
    assert llama_cpp.llama_memory_seq_pos_max(mem, 0) == e2.n_past - 1
    assert e2.tokens[-len(b) + 1 :] == b[:-1]  # the last pick is not fed


def test_draft_simple_greedy_text_is_the_targets(engines, draft_model_path):
    n = 40
    e1 = engines()
    a, rows_a = plain(e1, tokens_of(e1, CHAT), n)
    e2 = engines()
    spec = Speculator(DraftSimple(e2, draft_model_path, n_max=4))
    try:
        b, rows_b = speculative(e2, spec, tokens_of(e2, CHAT), n)
        st = spec.stats
        assert st.rounds > 0
        assert 0 < st.accepted < st.drafted  # the Q2_K draft is good, not perfect
        assert_same_text(a, rows_a, b, rows_b)
        # The draft context keeps what the target kept: the rejected tail left it too.
        draft = spec.drafter.engine  # type: ignore[attr-defined]
        assert draft.tokens == e2.tokens[: draft.n_past]
        assert draft.kv.check(draft.ctx) == []
    finally:
        spec.close()


def test_a_rejected_tail_leaves_the_cache(engines, draft_model_path):
    """A round whose draft is partly rejected: k + 1 rows decoded, the rejected cells cut."""
    e = engines()
    spec = Speculator(DraftSimple(e, draft_model_path, n_max=6))
    try:
        cut = None
        for rec in generate(e, spec, 60, tokens_of(e, CHAT)):
            sp = rec.spec
            if sp is not None and sp.draft and sp.accepted < len(sp.draft):
                cut = (rec, e.n_past)
                break
        assert cut is not None
        rec, n_past = cut
        sp = rec.spec
        assert sp is not None
        assert rec.phase == "verify" and rec.call.n_tokens == len(sp.draft) + 1
        assert all(t.logits for t in rec.call.tokens)  # logits on every row
        assert len(sp.picks) == sp.accepted + 1
        assert sp.picks[: sp.accepted] == sp.draft[: sp.accepted]
        assert sp.picks[-1] != sp.draft[sp.accepted]  # the first mismatch, replaced
        assert sp.removed == len(sp.draft) - sp.accepted
        assert rec.sampled == sp.picks[-1]
        # Rows after the mismatch were never sampled.
        assert all(r.pick is None for r in sp.rows[len(sp.picks) :])
        assert e.kv.check(e.ctx) == []
        last = rec.call.tokens[0].pos + sp.accepted
        assert llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(e.ctx), 0) == last
        assert n_past == e.n_past
    finally:
        spec.close()


def test_a_draft_model_with_another_vocabulary_is_one_sentence(engines, tmp_path):
    from tests.support.swa_model import write_swa_model

    e = engines()
    other = write_swa_model(tmp_path / "gemma2-tiny.gguf")
    with pytest.raises(TokenstepError) as err:
        DraftSimple(e, other)
    msg = str(err.value)
    assert msg.startswith(f"-md {other} cannot draft for this model: ")
    assert msg.count(".") >= 1 and "\n" not in msg


def chi2_sf(x: float, k: int) -> float:
    """P(X > x) for a chi-square with k degrees of freedom (the regularized upper
    incomplete gamma, by its series)."""
    a, z = k / 2.0, x / 2.0
    term = total = 1.0 / a
    n = 1
    while term > 1e-15 * total:
        term *= z / (a + n)
        total += term
        n += 1
    return max(0.0, 1.0 - math.exp(a * math.log(z) - z - math.lgamma(a)) * total)


def chi2_test(counts: dict[int, int], probs: dict[int, float]) -> float:
    """The p-value of ``counts`` under ``probs`` (tokens with an expected count under 5
    pooled into one bin)."""
    n = sum(counts.values())
    bins: list[tuple[float, int]] = []
    pooled_e, pooled_o = 0.0, 0
    for t, p in probs.items():
        if n * p >= 5:
            bins.append((n * p, counts.get(t, 0)))
        else:
            pooled_e, pooled_o = pooled_e + n * p, pooled_o + counts.get(t, 0)
    pooled_o += sum(c for t, c in counts.items() if t not in probs)
    if pooled_e > 0 or pooled_o:
        bins.append((max(pooled_e, 1e-12), pooled_o))
    stat = sum((o - e) ** 2 / e for e, o in bins)
    return chi2_sf(stat, len(bins) - 1)


def test_sampled_picks_follow_the_target_chain(engines):
    """Over a fixed seed set, the first token a round emits follows the target chain's own
    distribution at that context, and so does the second given the first was the draft's:
    accepting drafted tokens never biases the output."""
    e = engines(greedy=False, temp=1.0, top_k=40, top_p=1.0, min_p=0.0)
    toks = tokens_of(e, LIST)
    e.prefill(toks[:-1])
    last = toks[-1]
    spec = Speculator(NgramDrafter(NgramSimple(2, 3)))
    n0 = e.n_past
    draft = spec.drafter.draft(e.tokens, last, 8)
    assert len(draft) >= 2
    first, second = {}, {}
    n_seeds = 400
    for seed in range(n_seeds):
        e.settings.seed = seed
        rec = spec.round(e, last)
        assert rec is not None and rec.spec is not None and rec.spec.draft == draft
        picks = rec.spec.picks
        first[picks[0]] = first.get(picks[0], 0) + 1
        if picks[0] == draft[0]:
            second[picks[1]] = second.get(picks[1], 0) + 1
        e.truncate(n0)
    # The chain's distributions, from plain one-token decodes at the same contexts.
    e.feed(last)
    p_first = probs_after(e)
    e.feed(draft[0])
    p_second = probs_after(e)
    assert chi2_test(first, p_first) > 1e-3
    assert sum(second.values()) >= 100  # the draft's first token is often picked
    assert chi2_test(second, p_second) > 1e-3
    assert 0 < first.get(draft[0], 0) < n_seeds  # both outcomes happen


def probs_after(e: Engine) -> dict[int, float]:
    """The chain's final distribution over its survivors (a preview: no RNG advances)."""
    res = e.preview()
    return {int(t): float(p) for t, p in zip(res.final_ids, res.final_p, strict=True) if p > 0}
