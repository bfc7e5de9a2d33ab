"""The worker under random sequences of commands (Hypothesis's RuleBasedStateMachine).

Two workers on the real bundled model run the same commands in lockstep: ``seen`` also gets
every observer toggle (attention, its layers, the lens, its grid, the surprise map, the
anatomy tab), ``plain`` never does. After every command the invariants are checked: the KV
mirror agrees with llama.cpp, the header, the KV grid and the text agree on the context's
length, one prefill turn per message sent, and the two runs are the same run, picks and
logits bit for bit (looking never changes the run).

``make test`` runs a fixed seed and a bounded number of examples; ``make fuzz``
(``HYPOTHESIS_PROFILE=fuzz``) keeps drawing new ones for ``FUZZ_MINUTES`` minutes.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.support.saved import untimed
from tests.support.worker_states import COUNTS, TEXTS, run_machine
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.widgets.cache import footer, render_seqs
from tui.worker import commands as c
from tui.worker.resume import load_header, restore, saved_settings
from tui.worker.session_store import read_session
from tui.worker.spec_run import SpecRun
from tui.worker.thread import Worker


def _worker(model, spec: bool, settings_: SamplerSettings, shift: bool) -> Worker:
    cfg = EngineConfig(
        n_ctx=64, n_threads=2, context_full="shift" if shift else "stop", n_seq_max=3
    )
    eng = Engine(model, cfg, settings_)
    w = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=True)
    if spec:
        w.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 4))))
    return w


class WorkerStates(RuleBasedStateMachine):
    model = None  # set by the test: the session's bundled model
    tmp: Path = Path(".")

    def __init__(self) -> None:
        super().__init__()
        self.workers: list[Worker] = []
        self.sends = 0
        self.jumps = 0  # jumps since the chat began

    @initialize(
        spec=st.booleans(),
        greedy=st.booleans(),
        seed=st.integers(0, 2**16),
        shift=st.booleans(),
    )
    def start(self, spec: bool, greedy: bool, seed: int, shift: bool) -> None:
        s = SamplerSettings(temp=0.0) if greedy else SamplerSettings(temp=0.9, seed=seed)
        self.seen = _worker(self.model, spec, s, shift)
        self.plain = _worker(self.model, spec, s, shift)
        self.made = (spec, shift)
        self.workers = [self.seen, self.plain]
        COUNTS["examples"] += 1

    def teardown(self) -> None:
        for w in self.workers:
            w.observers.close()
            w.engine.close()

    # -- commands both runs get ---------------------------------------------------------------
    def both(self, cmd: object) -> None:
        COUNTS["commands"] += 1
        for w in self.workers:
            w.run_now(cmd)  # type: ignore[arg-type]
            assert w.error is None, w.error

    @rule(text=st.sampled_from(TEXTS))
    def send(self, text: str) -> None:
        self.both(c.Send(text))
        if self.plain.state.notice_level != "error":  # sent (not refused: too long, ...)
            self.sends += 1

    @precondition(lambda self: self.plain.engine.n_past > 0)
    @rule(n=st.integers(1, 4))
    def step(self, n: int) -> None:
        for _ in range(n):
            self.both(c.Step())

    @precondition(lambda self: self.plain.engine.n_past > 1)
    @rule(n=st.integers(1, 3))
    def rewind(self, n: int) -> None:
        self.both(c.RewindTokens(n))

    @precondition(lambda self: self.plain.engine.n_past > 0)
    @rule(token=st.sampled_from([28, 29, 30, 260, 1345]))
    def force(self, token: int) -> None:
        self.both(c.Force(token))

    @precondition(lambda self: self.plain.engine.n_past > 0)
    @rule()
    def fork(self) -> None:
        self.both(c.ForkSeq())

    @rule()
    def autoplay_toggle(self) -> None:
        self.both(c.TogglePlay())
        self.both(c.Pause())  # the loop is not running here: the toggle's own effect only

    @rule(shown=st.booleans())
    def paths_shown(self, shown: bool) -> None:
        self.both(c.PathsShown(shown))

    @precondition(lambda self: bool(self.plain.state.paths))
    @rule(data=st.data())
    def jump(self, data: st.DataObject) -> None:
        ids = [b.id for b in self.plain.state.paths]
        self.both(c.JumpPath(data.draw(st.sampled_from(ids))))
        self.jumps += 1

    @rule(
        name=st.sampled_from(["temp", "top_k", "top_p", "min_p"]),
        direction=st.sampled_from([-1, 1]),
    )
    def sampler(self, name: str, direction: int) -> None:
        self.both(c.Adjust(name, direction))

    @rule()
    def greedy(self) -> None:
        self.both(c.Greedy())

    @rule()
    def seed(self) -> None:
        self.both(c.Seed(1))

    @rule()
    def new_chat(self) -> None:
        self.both(c.NewChat())
        self.sends = self.jumps = 0

    @rule()
    def save_and_read(self) -> None:
        paths = []
        for i, w in enumerate(self.workers):
            p = self.tmp / f"s{COUNTS['commands']}-{i}.jsonl"
            w.run_now(c.Save(str(p)))
            paths.append(p)
        (h0, r0), (h1, r1) = (read_session(p) for p in paths)
        assert h0["context_tokens"] == h1["context_tokens"] == self.plain.engine.tokens
        assert h0["conversation"] == h1["conversation"]
        assert len(r0) == len(r1) == len(self.plain.engine.records) - self.plain.state.records_from
        assert [r.get("sampled") for r in r0] == [r.get("sampled") for r in r1]
        assert untimed(r0) == untimed(r1)  # the whole saved record, wall times left out

    @precondition(lambda self: self.plain.state.notice_level != "error")
    @rule()
    def save_and_resume(self) -> None:
        """Each run saves its session and goes on in a new worker resumed from it (the app's
        --resume): the context comes back by one prefill, the same run in both."""
        COUNTS["commands"] += 1
        spec, shift = self.made
        new = []
        for i, w in enumerate(self.workers):
            p = self.tmp / f"r{COUNTS['commands']}-{i}.jsonl"
            w.run_now(c.Save(str(p)))
            assert w.error is None, w.error
            hdr = load_header(p)
            fresh = _worker(self.model, spec, saved_settings(hdr), shift)
            restore(fresh, hdr, p)
            assert fresh.error is None, fresh.error
            assert fresh.engine.tokens == hdr["context_tokens"]
            new.append(fresh)
        self.teardown()
        self.seen, self.plain = new
        self.workers = new
        self.sends, self.jumps = (1 if self.plain.engine.n_past else 0), 0

    # -- looking: only the seen run ------------------------------------------------------------
    @rule(
        cmd=st.sampled_from(
            [
                c.AttentionToggle(),
                c.AttentionTabs(True, False),
                c.AttentionTabs(False, True),
                c.AttentionTabs(False, False),
                c.AttentionLayer(5),
                c.LensShown(True),
                c.LensShown(False),
                c.LensMode(),
                c.SurpriseScale(),
                "grid",
            ]
        )
    )
    def look(self, cmd: object) -> None:
        COUNTS["commands"] += 1
        w = self.seen
        if cmd == "grid":  # as the G key sends it
            cmd = c.lens_command("grid", (), w.lens.toggle_grid)
        w.run_now(cmd)  # type: ignore[arg-type]
        assert w.error is None, w.error
        w.build_view()  # the panes read the observer context: it catches up here

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def the_same_run(self) -> None:
        if not self.workers:
            return
        a, b = self.seen.engine, self.plain.engine
        assert a.tokens == b.tokens
        assert len(a.records) == len(b.records)
        assert (a.logits is None) == (b.logits is None)
        if a.logits is not None and b.logits is not None:
            assert a.logits.tobytes() == b.logits.tobytes()
        assert a.flash_attn_resolved == b.flash_attn_resolved
        assert not a.observers and not b.observers  # the run's context has no callback
        assert self.seen.state.notice == self.plain.state.notice or self.seen.state.notice

    @invariant()
    def the_observer_follows_the_run(self) -> None:
        """Its own context, caught up, holds the run's tokens; with the run's kernel and the
        run's batch (not widened to score a prompt or for the grid) the row that the run's
        current logits came from is the run's, bit for bit, in its replay of that decode."""
        if not self.workers:
            return
        obs = self.seen.observers
        ctx = obs.ready()
        if ctx is None:
            return
        assert ctx.problem is None, ctx.problem
        run = self.seen.engine
        assert ctx.engine.tokens == run.tokens
        assert ctx.engine.kv.check(ctx.engine.ctx) == []
        same = ctx.engine.flash_attn_resolved == run.flash_attn_resolved
        idx = run.logits_record
        if not same or idx is None or idx in ctx.widened:
            return
        seen, mine = ctx.record_for(idx), run.records.get(idx)
        if seen is None or mine is None or mine.phase == "verify":
            return  # a verify's top is the accepted row's, which only the run's picks know
        assert [(t.id, t.logit) for t in seen.top] == [(t.id, t.logit) for t in mine.top]

    @invariant()
    def cells_and_lengths_agree(self) -> None:
        for w in self.workers:
            eng = w.engine
            assert eng.kv.check(eng.ctx) == []
            v = w.build_view()
            assert w.error is None, w.error
            n = eng.n_past
            assert len(v.text.tokens) == n == len(eng.tokens)
            assert sum(1 for cell in v.kv.kv_cells if 0 in cell[2]) == n
            assert len(v.kv.kv_cells) == eng.kv.used
            assert v.header.n_records == len(eng.records) - w.state.records_from

    @invariant()
    def the_panes_read_the_record(self) -> None:
        """The timeline counts every llama_decode of the chat, as the record has them; tab 0
        and the header say the same context length; the run chart IS the record's picks: a
        token with a pick shows its p, p′, entropy, and a token without one shows nothing or
        a scored prompt token's p (no p′), after a jump to a path too (the jump writes the
        path's picks to the record again)."""
        for w in self.workers:
            eng, v = w.engine, w.build_view()
            tot = v.timeline.totals
            assert tot.prefill_calls + tot.decode_calls == len(eng.records) - w.state.records_from
            assert v.timeline.totals == eng.run.totals()
            assert footer(v).startswith(f"KV {eng.kv.used:,}/{eng.n_ctx:,}")
            assert v.text.n_past == eng.n_past
            assert v.header.n_past == eng.run.n_past() == eng.n_past  # the header's ctx: the record's
            seqs = render_seqs(v)  # one sequence: a line; after a fork, the sequences' table
            if v.text.fork_at is None:
                assert "F forks" in str(seqs) and eng.capabilities.fork  # forks are taken here
            assert v.text.surprise is not None
            picks = eng.run.picks_along(eng.tokens)
            assert len(v.text.surprise.values) == len(picks)
            for i, (pick, shown) in enumerate(zip(picks, v.text.surprise.values, strict=True)):
                if pick is not None:
                    assert shown == (pick.p, pick.p_final, pick.entropy), (i, shown, pick)
                else:
                    assert shown is None or shown[1] is None, (i, shown)  # a prompt's score

    @invariant()
    def one_turn_per_message(self) -> None:
        if not self.workers:
            return
        for w in self.workers:
            turns = w.engine.turns[w.state.turns_from :]
            assert tuple(w.build_view().cache.turns) == tuple(w.engine.run.turns())
            assert len(w.engine.run.turns()) == len(turns)
            # One prefill per message sent; a jump to a path that is decoded again is the
            # only other prefill a chat may have. Looking adds none.
            assert self.sends <= len(turns) <= self.sends + self.jumps, (self.sends, turns)


def test_worker_states(model, tmp_path):
    WorkerStates.model = model
    WorkerStates.tmp = tmp_path
    run_machine(WorkerStates, "fuzz")


def test_a_jump_to_a_path_the_live_reply_now_contains(model):
    """Found by ``make fuzz``: in spec mode a step after a rewind can emit a whole drafted
    round, so the live reply grows past the rewound path and contains it. Jumping there made
    the live reply a path that swallowed the target, and the jump then removed it twice
    (``list.remove``: the worker's thread died). Now the jump lands on the path's tokens."""
    w = _worker(model, True, SamplerSettings(temp=0.0), False)
    try:
        w.run_now(c.Send("The cat"))
        w.run_now(c.Step())
        w.run_now(c.RewindTokens(1))
        w.run_now(c.Step())
        assert w.error is None, w.error
        start = w.state.reply_start
        live = tuple(w.engine.tokens[start:])
        inside = [b for b in w.state.paths if live[: len(b.tokens)] == b.tokens]
        assert inside, (live, [b.tokens for b in w.state.paths])  # the case this test is for
        target = inside[0]
        w.run_now(c.JumpPath(target.id))
        assert w.error is None, w.error
        assert tuple(w.engine.tokens[start:]) == target.tokens
        assert w.engine.kv.tokens(0) == w.engine.tokens  # the cells hold what the run says
    finally:
        w.observers.close()
        w.engine.close()


def test_cells_put_back_in_order_keep_the_pending_picks_p(model):
    """Found by ``make fuzz``: after a fork, a rewind and a drafted round, the next step first
    decodes sequence 0's tail again to keep its cells in position order. That dropped the
    surprise value of the pick waiting to be decoded, so the run chart showed no p for a token
    the record holds a pick for. Every pick on the chart now has its record's p, p′."""
    w = _worker(model, True, SamplerSettings(temp=0.0), False)
    try:
        text = "Colors: red, green, blue, red, green"
        for cmd in (c.Send(text), c.Send(text), c.ForkSeq(), *[c.Step()] * 4, c.RewindTokens(2)):
            w.run_now(cmd)
        before = len(w.engine.records)
        for _ in range(4):
            w.run_now(c.Step())
        assert w.error is None, w.error
        purposes = [ev.purpose for ev in w.engine.run.recent() if type(ev).__name__ == "Decode"]
        assert "prompt" in purposes[-(len(w.engine.records) - before) :]  # the re-decode ran
        chart = w.build_view().text.surprise
        assert chart is not None
        for i, t in enumerate(w.engine.tokens):
            pick = w.engine.run.pick_at(i, t)
            if pick is not None:
                assert chart.values[i] == (pick.p, pick.p_final, pick.entropy), i
    finally:
        w.observers.close()
        w.engine.close()
