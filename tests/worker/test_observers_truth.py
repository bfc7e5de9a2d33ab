"""Looking never changes the run.

The same script of commands runs twice on the real bundled model, once as it is and once with
the observers (attention, a layer change, all layers, the lens, its grid, the surprise map)
toggled at points chosen by a seeded RNG. The picks, every logits row the run kept (bit for
bit) and the saved session (its records and conversation, timings left out) must be the same,
greedy and sampled. The observers' own context replays the run's decode calls; the run's
context is never rebuilt and never gets an eval callback."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.llama_server import llama_server  # noqa: F401
from tests.support.saved import untimed
from tui.engine import SamplerSettings
from tui.worker import commands as c
from tui.worker.session_store import read_session
from tui.worker.thread import Worker

SCRIPT: list[Any] = [
    c.Send("Name three colors."),
    *[c.Step()] * 6,
    c.RewindTokens(2),
    *[c.Step()] * 3,
    c.Force(28),  # a forced token: the run goes on from it
    *[c.Step()] * 3,
    c.ForkSeq(),
    *[c.Step()] * 2,
    c.Send("And two more?"),
    *[c.Step()] * 5,
]


def _observer_cmds(w: Worker) -> list[Any]:
    return [
        c.AttentionTabs(True, False),
        c.AttentionToggle(),
        c.AttentionLayer(3),
        c.LensShown(True),
        c.Call(w.lens.toggle_grid),
        c.SurpriseScale(),
        c.LensShown(False),
        c.AttentionToggle(),
        c.AttentionTabs(False, True),
    ]


def _drive(w: Worker, script: list[Any], observe: int | None, path: Path) -> dict:
    """Run ``script``; with ``observe``, an observer command after a step at random (the
    panes read the observer there: it catches up). Then save the session to ``path``."""
    rng = random.Random(observe)
    looks = _observer_cmds(w) if observe is not None else []
    picks, rows = [], []
    for cmd in script:
        w.run_now(cmd)
        assert w.error is None, w.error
        assert w.state.notice_level != "error", w.state.notice
        picks.append(tuple(w.engine.tokens))
        if w.engine.logits is not None:
            rows.append(hashlib.sha256(w.engine.logits.tobytes()).hexdigest())
        if looks and rng.random() < 0.6:
            w.run_now(looks.pop(0))
            assert w.error is None, w.error
            w.build_view()  # the panes read the observer: it catches up here
            assert w.observers.local or w.observers.ctx is None  # refused: no local context
    if observe is not None:
        assert len(looks) < len(_observer_cmds(w)), "nothing was looked at"
        local = w.observers.local
        assert not local or w.observers.ctx is not None or not looks, "the observers never ran"
    w.run_now(c.Save(str(path)))
    header, records = read_session(path)
    return {
        "picks": picks,
        "rows": rows,  # every kept logits row, bit for bit
        "records": records,
        "conversation": header["conversation"],
        "tokens": header["context_tokens"],
    }


def _same(seen: dict, plain: dict) -> None:
    assert seen.keys() == plain.keys()
    for key in seen:
        if key != "records":
            assert seen[key] == plain[key], key
    assert len(seen["records"]) == len(plain["records"])
    for a, b in zip(seen["records"], plain["records"], strict=True):
        assert untimed(a) == untimed(b)


def _run(make_engine, tmp_path: Path, settings: SamplerSettings, observe: int | None) -> dict:
    eng = make_engine(settings, n_ctx=512)
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        got = _drive(w, SCRIPT, observe, tmp_path / f"s{observe}.jsonl")
        assert not eng.observers  # the run's context never had an eval callback
        return got | {"flash": eng.flash_attn_resolved}
    finally:
        w.observers.close()


@pytest.mark.parametrize(
    ("settings", "seed"),
    [(SamplerSettings(temp=0.0), 1), (SamplerSettings(temp=0.9, top_k=40, top_p=0.95, seed=11), 2)],
    ids=["greedy", "sampled"],
)
def test_observers_toggled_at_random_leave_the_run_bit_identical(
    make_engine, tmp_path, settings, seed
):
    _same(_run(make_engine, tmp_path, settings, seed), _run(make_engine, tmp_path, settings, None))


def test_the_observer_replays_the_run_bit_for_bit(make_engine):
    """The lens's context has the run's kernel: replaying the run's decode calls gives the
    run's logits exactly, so its last layer is compared with the run's own numbers."""
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        w.run_now(c.Send("Name three colors."))
        for _ in range(4):
            w.run_now(c.Step())
        w.run_now(c.RewindTokens(1))
        w.run_now(c.LensShown(True))
        v = w.build_view()
        ctx = w.observers.ctx
        assert ctx is not None and ctx.engine.flash_attn_resolved == eng.flash_attn_resolved
        assert ctx.engine.tokens == eng.tokens
        seen = ctx.record_for(eng.logits_record)
        assert seen is not None and "lens" in seen.extras
        assert v.lens is not None and v.lens.step is not None
        assert "own context" in v.lens.observer and "KV" in v.lens.observer
        assert seen.extras["lens_check"]["top1"]["id"] == int(eng.logits.argmax())
        # The observer's own logits row for that step is the run's, bit for bit.
        assert ctx.engine.logits is not None
        assert ctx.engine.logits.tobytes() == eng.logits.tobytes()
    finally:
        w.observers.close()


def test_attention_runs_in_its_own_context_and_says_what_it_is(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    before = eng.flash_attn_resolved
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        w.run_now(c.Send("Hi"))
        w.run_now(c.AttentionTabs(True, False))
        w.run_now(c.AttentionToggle())
        v = w.build_view()
        assert eng.flash_attn_resolved == before and not eng.observers
        ctx = w.observers.ctx
        assert ctx is not None and ctx.engine.flash_attn_resolved == "off"
        assert v.attention is not None and v.attention.att is not None
        assert len(v.attention.att.positions) == len(eng.tokens)
        assert "observer context" in v.attention.status and "KV " in v.attention.status
        # Its memory is one more KV cache of the run's size, no more.
        assert ctx.kv_bytes == eng.kv_bytes_allocated
    finally:
        w.observers.close()


def test_attention_over_a_quantized_v_cache_holds_v_in_f16_in_its_own_context(make_engine):
    """llama.cpp refuses a q8_0 V cache without flash attention, and the capture needs it off:
    the observer's context holds V in f16 (K keeps q8_0) and says so; the run keeps its q8_0
    cache, flash attention and picks (a run that never looked steps to the same tokens)."""

    def run(look: bool) -> tuple[list[int], Worker]:
        eng = make_engine(
            SamplerSettings(temp=0.0),
            n_ctx=512,
            flash_attn="on",
            cache_type_k="q8_0",
            cache_type_v="q8_0",
        )
        w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
        w.run_now(c.Send("Name a color."))
        w.run_now(c.Step())
        if look:
            row = eng.logits.tobytes()
            w.run_now(c.AttentionTabs(True, False))
            w.run_now(c.AttentionToggle())
            assert w.error is None and w.attention.on, w.state.notice
            assert eng.logits.tobytes() == row
        for _ in range(4):
            w.run_now(c.Step())
        return list(eng.tokens), w

    plain, _ = run(False)
    looked, w = run(True)
    try:
        assert looked == plain
        ctx = w.observers.ctx
        assert ctx is not None and ctx.engine.config.cache_type_v == "f16"
        assert ctx.engine.config.cache_type_k == "q8_0" and ctx.engine.flash_attn_resolved == "off"
        assert w.engine.config.cache_type_v == "q8_0" and w.engine.flash_attn_resolved == "on"
        v = w.build_view()
        assert v.attention is not None and v.attention.att is not None
        assert "f16 V cache, the run's on with q8_0" in v.attention.status
        assert len(v.attention.att.positions) == len(w.engine.tokens)
    finally:
        w.observers.close()


def test_over_llama_server_each_observer_says_it_needs_a_local_model(llama_server, tmp_path):  # noqa: F811
    """Over llama-server there is no context to replay into: each observer refuses in one
    sentence, and the run goes on as if nobody had asked (the same text, step for step)."""
    from tui.engine.remote.remote import RemoteBackend

    def run(look: bool) -> list[int]:
        backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0))
        w = Worker(backend, autoplay=False, autosave_dir=None)
        try:
            w.run_now(c.Send("Say hello."))
            for i in range(4):
                if look:
                    cmd = [c.AttentionToggle(), c.LensShown(True), c.SurpriseScale(), c.ForkSeq()][i]
                    w.run_now(cmd)
                    notice = w.state.notice
                    if isinstance(cmd, c.LensShown):  # the tab's own line says it
                        notice = w.build_view().lens.status  # type: ignore[union-attr]
                    assert "needs a local model" in notice or "Over llama-server" in notice, notice
                    assert notice.count(". ") <= 2 and "Traceback" not in notice
                    assert w.observers.ctx is None
                w.run_now(c.Step())
            return list(backend.tokens)
        finally:
            w.stop()

    assert run(True) == run(False)


SERVER_SCRIPT: list[Any] = [  # forks need a local model: the script without one
    c.Send("Name three colors."),
    *[c.Step()] * 6,
    c.RewindTokens(2),
    *[c.Step()] * 3,
    c.Force(28),
    *[c.Step()] * 3,
    c.Send("And two more?"),
    *[c.Step()] * 5,
]


def _run_server(log_dir: Path, settings: SamplerSettings, observe: int | None) -> dict:
    """The script over a llama-server of its own, started fresh: its slot's cache then holds
    the same history in both runs, so the server's rows are the same rows, bit for bit."""
    from tests.support.llama_server import start_server
    from tui.engine.remote.remote import RemoteBackend

    server = start_server(log_dir)
    try:
        w = Worker(RemoteBackend(server.url, settings), autoplay=False, autosave_dir=None)
        try:
            got = _drive(w, SERVER_SCRIPT, observe, log_dir / f"server-s{observe}.jsonl")
        finally:
            w.stop()
    finally:
        server.stop()
    for r in got["records"]:  # each run has a server of its own: its address differs
        r.get("server", {}).pop("url", None)
    return got


@pytest.mark.parametrize(
    ("settings", "seed"),
    [(SamplerSettings(temp=0.0), 3), (SamplerSettings(temp=0.9, top_k=40, top_p=0.95, seed=11), 4)],
    ids=["greedy", "sampled"],
)
def test_over_llama_server_observers_toggled_at_random_leave_the_run_bit_identical(
    tmp_path, settings, seed
):
    """The paired run over llama-server: the observers' refusals send no request, draw no
    random number and note nothing in the record, so the picks, the rows the server sent (bit
    for bit) and the saved session are the run without them."""
    _same(_run_server(tmp_path, settings, seed), _run_server(tmp_path, settings, None))
