"""The run's record (tui/engine/record/run_record.py): what the engine writes at each act, bounded,
and the figures the panes read from it."""

from __future__ import annotations

from tui.engine import SamplerSettings
from tui.engine.record.run_record import Clear, Decode, Pick, Round, RunRecord, Turn, event_to_dict


def test_totals_count_calls_and_emitted_tokens():
    run = RunRecord(keep=4)
    run.note(Decode(0, "prompt", "prefill", 30, 10.0))
    run.note(Decode(1, "step", "decode", 1, 2.0))
    run.note(Decode(2, "verify", "verify", 5, 3.0))
    run.note(Round(2, True, 3, 2, 4.0))  # 5 rows decoded, 3 picks emitted, 2 draft decodes
    t = run.totals()
    assert (t.prefill_calls, t.prefill_tokens, t.prefill_ms) == (1, 30, 10.0)
    assert (t.decode_calls, t.decode_tokens, t.decode_ms) == (2, 1 + 3, 5.0)
    assert (t.verify_calls, t.draft_calls, t.draft_ms) == (1, 2, 4.0)
    assert len(run.recent()) == 4 and run.n == 4
    run.note(Turn(0, 30, 10.0, (0, 1)))
    assert len(run.recent()) == 4 and run.n == 5  # bounded: the oldest event left memory
    assert run.totals().decode_calls == 2  # totals still count it
    run.note(Clear())
    assert run.timeline() == ((), run.totals(), 0) and run.turns() == ()


def test_the_engine_writes_each_act_once(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0))
    eng.sync_prompt(eng.vocab.tokenize("The sea is", add_special=True))
    for _ in range(3):
        eng.step()
    eng.rewind(1)
    events = eng.run.recent()
    decodes = [e for e in events if isinstance(e, Decode)]
    assert len(decodes) == len(eng.records)  # every llama_decode of the run, no other
    assert [d.record for d in decodes] == [r.index for r in eng.records]
    assert len(eng.run.turns()) == 1 and eng.run.turns()[0].computed == eng.turns[0].computed
    picks = [e for e in events if isinstance(e, Pick)]
    assert len(picks) == 3 and all(p.seq == 0 and p.cuts for p in picks)
    n = len(eng.tokens)
    assert [eng.run.pick_at(i, t) is not None for i, t in enumerate(eng.tokens)] == [
        False
    ] * (n - 2) + [True] * 2  # the rewound pick left the record with its token
    assert eng.run.n_picks() == 2
    d = event_to_dict(picks[0])
    assert d["event"] == "pick" and d["token"] == picks[0].token and isinstance(d["cuts"], list)


def test_trace_writes_the_records_events_through_the_one_serializer(model_path):
    """`trace --events`: after each record, the events the engine noted for it, as the app
    keeps them; each pick's p is the one its record lists for the sampled token."""
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "tui", "trace", "-m", str(model_path), "-n", "4", "--events",
         "--temp", "0", "-p", "The sea is"],
        capture_output=True, text=True, timeout=300, check=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    records = [d for d in lines if "event" not in d]
    events = [d for d in lines if "event" in d]
    decodes = [e for e in events if e["event"] == "decode"]
    picks = [e for e in events if e["event"] == "pick"]
    assert [d["record"] for d in decodes] == [r["step"] for r in records]
    sampled = [r for r in records if r.get("sampled")]
    assert len(picks) == len(sampled) == 4
    for pick, rec in zip(picks, sampled, strict=True):
        assert pick["token"] == rec["sampled"]["id"]
        top = {c["id"]: c for c in rec["top"]}
        assert abs(pick["p"] - top[pick["token"]]["p"]) <= 1e-6  # both rounded to 6 places
        assert pick["cuts"][0][0] == rec["stages"][0]["name"]
