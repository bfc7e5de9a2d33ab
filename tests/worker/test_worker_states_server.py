"""The worker over a real llama-server under random sequences of commands: the commands that
make sense there (send, step, rewind, force, the sampler's stages, fork and the surprise map,
which are refused or say what they cannot do, save and resume, new chat). After every command:
the panes' figures are the run record's, one turn per message sent, and every label's claim
holds for this backend (no "F forks" where forks are refused, no "KV 0" beside the context's
tokens, no promise that the next prompt is scored).

``make test`` runs a fixed seed and a few examples; with ``HYPOTHESIS_PROFILE=fuzz`` it runs
for ``FUZZ_MINUTES`` as the local machine does."""

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

from tests.support.llama_server import llama_server  # noqa: F401
from tests.support.worker_states import COUNTS, TEXTS, run_machine
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.widgets.cache import footer, render_seqs
from tui.widgets.surprise import legend
from tui.worker import commands as c
from tui.worker.resume import load_header, restore, saved_settings
from tui.worker.thread import Worker


def _worker(url: str, s: SamplerSettings) -> Worker:
    return Worker(RemoteBackend(url, s, n_probs=10), raw=True, autoplay=False, autosave_dir=None)


class ServerStates(RuleBasedStateMachine):
    url = ""
    tmp: Path = Path(".")

    def __init__(self) -> None:
        super().__init__()
        self.w: Worker | None = None
        self.sends = 0
        self.picked = 0  # tokens below this came back from a saved session (no picks kept)

    @initialize(greedy=st.booleans(), seed=st.integers(0, 2**16))
    def start(self, greedy: bool, seed: int) -> None:
        s = SamplerSettings(temp=0.0) if greedy else SamplerSettings(temp=0.9, seed=seed)
        self.w = _worker(self.url, s)
        COUNTS["examples"] += 1

    def teardown(self) -> None:
        if self.w is not None:
            self.w.stop()

    def run(self, cmd: object) -> None:
        COUNTS["commands"] += 1
        assert self.w is not None
        self.w.run_now(cmd)  # type: ignore[arg-type]
        assert self.w.error is None, self.w.error

    @rule(text=st.sampled_from(TEXTS))
    def send(self, text: str) -> None:
        self.run(c.Send(text))
        if self.w is not None and self.w.state.notice_level != "error":
            self.sends += 1

    @precondition(lambda self: self.w is not None and self.w.engine.n_past > 0)
    @rule(n=st.integers(1, 3))
    def step(self, n: int) -> None:
        for _ in range(n):
            self.run(c.Step())

    @precondition(lambda self: self.w is not None and self.w.engine.n_past > 1)
    @rule(n=st.integers(1, 2))
    def rewind(self, n: int) -> None:
        self.run(c.RewindTokens(n))
        assert self.w is not None
        self.picked = min(self.picked, self.w.engine.n_past)

    @precondition(lambda self: self.w is not None and self.w.engine.n_past > 0)
    @rule(token=st.sampled_from([28, 30, 260]))
    def force(self, token: int) -> None:
        self.run(c.Force(token))

    @precondition(lambda self: self.w is not None and self.w.engine.n_past > 0)
    @rule()
    def fork(self) -> None:
        self.run(c.ForkSeq())  # refused in one sentence: forks need a local model

    @rule()
    def surprise(self) -> None:
        self.run(c.SurpriseScale())

    @rule(name=st.sampled_from(["temp", "top_k", "top_p"]), direction=st.sampled_from([-1, 1]))
    def sampler(self, name: str, direction: int) -> None:
        self.run(c.Adjust(name, direction))

    @rule()
    def new_chat(self) -> None:
        self.run(c.NewChat())
        self.sends = self.picked = 0

    @precondition(lambda self: self.w is not None and self.w.state.notice_level != "error")
    @rule()
    def save_and_resume(self) -> None:
        assert self.w is not None
        p = self.tmp / f"server{COUNTS['commands']}.jsonl"
        self.run(c.Save(str(p)))
        hdr = load_header(p)
        fresh = _worker(self.url, saved_settings(hdr))
        restore(fresh, hdr, p)
        assert fresh.error is None, fresh.error
        assert fresh.engine.tokens == hdr["context_tokens"]
        self.w.stop()
        self.w = fresh
        self.sends = 1 if fresh.engine.n_past else 0
        self.picked = fresh.engine.n_past

    @invariant()
    def labels_hold_and_figures_are_the_records(self) -> None:
        w = self.w
        if w is None:
            return
        eng, v = w.engine, w.build_view()
        assert w.error is None, w.error
        assert not eng.capabilities.fork and not eng.capabilities.kv_cells
        assert footer(v).startswith(f"{eng.n_past:,}/{eng.n_ctx:,} tokens")
        assert v.text.n_past == eng.n_past == len(v.text.tokens)
        seqs = render_seqs(v).plain
        assert "F forks" not in seqs and "needs a local model" in seqs, seqs
        sv = v.text.surprise
        if sv is not None and sv.scale != "off":
            assert "the next one is" not in legend(sv).plain
        assert sv is None or not sv.scores_prompts
        tot = v.timeline.totals
        assert tot.prefill_calls + tot.decode_calls == len(eng.records) - w.state.records_from
        turns = eng.turns[w.state.turns_from :]
        assert tuple(v.cache.turns) == eng.run.turns() and len(turns) == len(eng.run.turns())
        assert len(turns) == self.sends, (self.sends, turns)
        assert v.header.n_past == eng.run.n_past() == eng.n_past  # the header's ctx: the record's
        # The run chart IS the record's picks: one per sampled or forced token, each from the
        # server's top K (partial, and the chart's footer says so); nothing else has a value.
        assert sv is not None
        picks = eng.run.picks_along(eng.tokens)
        for i, (pick, shown) in enumerate(zip(picks, sv.values, strict=True)):
            if pick is None:
                assert shown is None, (i, shown)  # a prompt token: never scored over HTTP
                continue
            assert pick.partial and i in sv.partial, (i, pick)
            assert shown == (pick.p, pick.p_final, pick.entropy), (i, shown, pick)
            assert 0.0 <= pick.p <= 1.0 and pick.cuts and pick.record is not None
        start = w.state.reply_start
        if start is not None:  # every reply token picked in this worker has its pick
            assert all(picks[i] is not None for i in range(max(start, self.picked), eng.n_past))


def test_worker_states_over_llama_server(llama_server, tmp_path):  # noqa: F811
    ServerStates.url = llama_server.url
    ServerStates.tmp = tmp_path
    run_machine(ServerStates, "fuzz over llama-server")
