"""Issue 5, claim 4: a full context forgets. Policy stop, or llama.cpp's context shift."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.cli import run_cli
from tui.engine import SamplerSettings

PROMPT = "Write a long story about a dragon who learns to bake bread in a mountain village."


def step_on(eng):
    """One step that does not end at an end-of-generation token (it feeds " and" instead)."""
    rec = eng.step()
    if rec is None and eng.stop_reason == "end of generation":
        eng.stop_reason = None
        rec = eng.feed(eng.vocab.tokenize(" and", add_special=False)[0])
    return rec


def test_stop_policy_stops_exactly_at_the_context_size(make_engine):
    eng = make_engine(n_ctx=64, context_full="stop")
    assert eng.n_ctx == 64 and eng.n_cells >= 64  # llama.cpp rounds its cache up
    eng.prefill(eng.vocab.tokenize(PROMPT))
    recs = []
    while (rec := step_on(eng)) is not None:
        recs.append(rec)
    assert eng.n_past == 64 and eng.stop_reason == "context full"
    assert recs[-1].n_ctx_tokens == 64 and not eng.shifts and not eng.kv.forgotten


@pytest.mark.parametrize("keep", [0, 5])
def test_shift_keeps_n_keep_forgets_half_and_goes_on(make_engine, keep):
    eng = make_engine(
        SamplerSettings(temp=0.9, seed=3), n_ctx=64, context_full="shift", n_keep=keep
    )
    prompt = eng.vocab.tokenize(PROMPT)
    eng.prefill(prompt)
    history = list(prompt)  # every token ever fed, oldest first
    n_shifts_seen = 0
    for _ in range(150):
        before = eng.tokens
        rec = step_on(eng)
        assert rec is not None
        history.append(rec.call.tokens[0].id)
        assert not rec.kv_problems, rec.kv_problems  # llama.cpp's pos min/max agree
        pos = eng.kv.positions(0)
        assert pos == list(range(len(pos)))  # positions closed up after the shift
        if rec.shift is not None:
            n_shifts_seen += 1
            ev = rec.shift
            n_keep = eng.keep_count()
            assert ev.n_keep == n_keep == keep + (1 if eng.info.add_bos else 0)
            assert ev.n_past == 64 and ev.n_discard == (64 - n_keep) // 2
            dropped = before[n_keep : n_keep + ev.n_discard]
            assert [f.token for f in ev.forgotten] == dropped
            assert [f.pos for f in ev.forgotten] == list(range(n_keep, n_keep + ev.n_discard))
            want = before[:n_keep] + before[n_keep + ev.n_discard :] + [history[-1]]
            assert eng.tokens == want
            # llama.cpp sees the same: the newest token sits right after the kept cells
            assert rec.call.tokens[0].pos == 64 - ev.n_discard
    assert n_shifts_seen >= 2
    assert len(eng.kv.forgotten) == sum(s.n_discard for s in eng.shifts)
    assert eng.n_past <= 64 and eng.stop_reason is None


def test_a_shift_is_llama_cpp_arithmetic_and_verify_says_what_it_changed(make_engine):
    """After a shift the kept cells hold keys computed while the forgotten tokens were still
    there, rotated to new positions: a recompute that never saw those tokens is another
    computation (measured here: max |Δ| up to 3.9), and verify says so rather than blaming
    rounding. The shift itself is exact arithmetic: the same calls and the same shift in a
    second context give the same logits, bit for bit."""

    def run() -> tuple:
        eng = make_engine(n_ctx=64, context_full="shift", n_keep=4, flash_attn="on")
        eng.prefill(eng.vocab.tokenize(PROMPT))
        while not eng.shifts:
            assert step_on(eng) is not None
        return eng, list(eng.tokens), np.asarray(eng.logits).copy()

    eng, tokens, logits = run()
    res = eng.verify_last("batched")
    assert res.shifted and "computed while the forgotten tokens were still" in res.explain()
    assert "rounding differences grow" not in res.explain()
    again, tokens2, logits2 = run()
    assert tokens2 == tokens and again.shifts == eng.shifts
    assert logits2.tobytes() == logits.tobytes()


def test_keep_leaving_nothing_to_drop_stops_with_a_reason(make_engine):
    eng = make_engine(n_ctx=64, context_full="shift", n_keep=-1)
    prompt = eng.vocab.tokenize(PROMPT * 6)[:63]
    assert len(prompt) == 63
    eng.prefill(prompt)  # --keep -1 keeps the whole 63-token prompt
    step_on(eng)
    assert step_on(eng) is None and "nothing to drop" in (eng.stop_reason or "")


def test_trace_with_shift_keeps_going_past_the_context():
    counting = "1, 2, 3, 4, 5, 6, 7, 8,"  # greedy keeps counting: no end-of-generation token
    res = run_cli(
        "trace", "-p", counting, "-n", "90", "-c", "64", "--temp", "0", "--context-full", "shift"
    )
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    assert len(recs) == 90
    shifts = [r["shift"] for r in recs if "shift" in r]
    assert shifts and shifts[0]["n_discard"] == 32 and len(shifts[0]["forgotten"]) == 32
    assert max(r["kv"]["used"] for r in recs) <= 64
    assert all(r["kv"]["check"] == "ok" for r in recs)


def test_bad_context_full_value_is_one_sentence():
    res = run_cli("trace", "-p", "x", "--context-full", "wrap")
    assert res.returncode == 1 and b"Traceback" not in res.stderr
    res = run_cli("trace", "-p", "x", "--keep", "-3")
    assert res.returncode == 1 and b"--keep" in res.stderr
