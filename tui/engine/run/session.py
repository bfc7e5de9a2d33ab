"""The stepping engine: one ``llama_context`` driven one ``llama_decode`` at a time.

Each call to :meth:`Engine.prefill` or :meth:`Engine.step` runs the seven stages of the loop
(tokenize, batch, decode, logits, sample, end/detokenize, feed back) and leaves a
:class:`~tui.engine.run.step.StepRecord` per ``llama_decode`` call. Nothing here knows about a
screen: the TUI, the ``trace`` command and tests all read the same records.

The stages live in their own modules (context, prompt, decode, logits, sequences, shift,
loop); the Engine holds the state they share and is the public face.

Not thread-safe by design: exactly one thread may own an Engine (the TUI's decode worker).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from ..model.context import Context, EngineConfig
from ..model.errors import TokenstepError
from ..model.kv_order import CellSlots
from ..model.kvcache import KVLayout, KVLogReport, KVMirror
from ..model.lens import head_problem
from ..model.model import Model
from ..model.offload import placement
from ..model.tokens import Vocab
from ..model.work import WorkCounter
from ..record.run_record import Clear, RunRecord
from ..record.surprise import SurpriseLog
from ..sampler.grammar import check_grammar
from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings
from . import loop, paths, prompt, replay, sequences, shift
from .backend import LOCAL, LOCAL_LENS, Capabilities
from .batch import BatchToken, DecodeCall, LlamaBatch, ubatch_chunks
from .decode import DecodeObserver, decode
from .logits import LogitsMemory
from .overlap import Overlap
from .records import RecordLog
from .replay import ReplayLog
from .step import Branch, Parked, PrefillTurn, Sampled, ShiftEvent, StepRecord
from .trace import record_to_dict

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from .backend import Backend
    from .verify import Verifier, VerifyResult


class Engine:
    """A model plus one context, stepped by hand."""

    def __init__(
        self,
        model: Model,
        config: EngineConfig | None = None,
        settings: SamplerSettings | None = None,
        observers: list[DecodeObserver] | None = None,
    ) -> None:
        self.model = model
        self._caps: Capabilities | None = None
        self.observers = list(observers or [])
        # Entered around each llama_decode when no observer runs Python inside the graph: the
        # app's worker opens it to handle a sampler key while the decode runs (see decode.py).
        self.decode_gate: Callable[[], AbstractContextManager[object]] | None = None
        self.info = model.info
        self.config = config or EngineConfig()
        self.config.validate()
        self.settings = settings or SamplerSettings()
        self.settings.validate()
        self.vocab = Vocab(model.vocab, model.info.n_vocab)
        self.context = Context(model, self.config, self.observers)
        self.type_k, self.type_v = self.context.type_k, self.context.type_v
        self.log_lines = self.context.log_lines
        self.kv_reports: list[KVLogReport] = self.context.kv_reports
        self.flash_attn_resolved = self.context.flash_attn_resolved
        # Where the layers and the KV cache live, from llama.cpp's log (GPU offload).
        self.placement = placement(model.load_log, self.log_lines, model.offload)
        self.n_cells = self.context.n_cells
        self.n_ctx = self.context.n_ctx
        self.batch = LlamaBatch(max(self.config.n_batch, 1), self.config.n_seq_max)
        self.settings.check_vocab(self.info.n_vocab)
        if self.settings.grammar:
            check_grammar(model.vocab, self.settings.grammar)
        self.chain = SamplerChain(self.info.n_vocab, self.settings.seed, model.vocab, self.n_ctx)
        self.gen_start = 0  # where this turn's generated tokens begin (the grammar sees those)
        self.kv = KVMirror(self.n_ctx, slots=CellSlots(self.n_cells))
        self.layout = KVLayout(
            self.info.n_layer,
            self.info.n_embd_k_gqa,
            self.info.n_embd_v_gqa,
            self.type_k,
            self.type_v,
        )
        self.records = RecordLog(self._record_dict)  # the newest in memory, the rest on disk
        self.logits_memory = LogitsMemory()
        self.stop_reason: str | None = None
        self.work = WorkCounter()
        self.turns: list[PrefillTurn] = []
        self.shifts: list[ShiftEvent] = []
        self.branches: dict[int, Branch] = {}
        self.parked: dict[int, Parked] = {}  # sequences keeping paths not taken (paths.py)
        self.n_prompt = 0  # length of the first prompt (for --keep -1)
        self.surprise = SurpriseLog()  # how expected each context token was (surprise map)
        self.score_prompt = False  # decode prompts with logits on every row (surprise map)
        self._verifier: Verifier | None = None
        # Every llama_decode and memory edit since the last clear: an observer's own context
        # runs them again (observer_context.py), so this one is never rebuilt for a view.
        self.replay = ReplayLog()
        self.run = RunRecord()  # the one record of the run (run_record.py): panes read it
        self.overlap = Overlap()  # a step's views: inline, or while the next decode runs

    def _record_dict(self, rec: StepRecord) -> dict[str, Any]:
        return record_to_dict(self, rec, weights=False)  # spilled: as a saved session

    # -- state ---------------------------------------------------------------------------------
    @property
    def ctx(self) -> llama_cpp.llama_context_p:
        return self.context.ctx

    @property
    def flash_attn_note(self) -> str | None:
        return self.context.flash_attn_note

    @property
    def capabilities(self) -> Capabilities:
        """Everything: a local context can show its cells, attention, graph and verify; the
        logit lens when the model file has a head the lens can read."""
        if self._caps is None:
            self._caps = LOCAL_LENS if head_problem(self.model.header) is None else LOCAL
        return self._caps

    @property
    def local(self) -> Engine:
        """This session: its context is here (forks, verify, observers)."""
        return self

    @property
    def server(self) -> None:
        """No server: the context is in this process."""
        return None

    @property
    def tokens(self) -> list[int]:
        """The tokens in the context (sequence 0), oldest first."""
        return self.kv.tokens(0)

    @property
    def n_past(self) -> int:
        return self.kv.count(0)

    @property
    def kv_bytes_used(self) -> int:
        return self.kv.used * self.layout.bytes_per_token

    @property
    def kv_bytes_allocated(self) -> int:
        return self.n_cells * self.layout.bytes_per_token

    @property
    def logits(self) -> np.ndarray | None:
        """Sequence 0's current logits row (None before a prompt, or after a deep rewind)."""
        return self.logits_memory.logits

    @property
    def logits_record(self) -> int | None:
        """The record whose decode produced :attr:`logits`."""
        return self.logits_memory.record

    def stopped(self, reason: str | None, seq: int = 0) -> None:
        """Generation ended for ``reason`` ("end of generation", "context full ..."); None: a
        new turn or a rewind, generation may go on. ``seq``: a forked sequence's own stop."""
        if seq:
            self.branches[seq].stop_reason = reason
        else:
            self.stop_reason = reason

    def use_chat_template(self, template: str) -> None:
        """Format chats with ``template`` (``--chat-template``, or ChatML for a model that has
        none, as llama-server falls back); the model's facts otherwise stay as read."""
        self.info = dataclasses.replace(self.info, chat_template=template)

    def score_prompts(self, on: bool) -> None:
        """Decode prompts with logits on every row (the surprise map, the lens grid) or not."""
        self.score_prompt = on

    def first_prompt(self, n: int) -> None:
        """A prompt of ``n`` tokens went into an empty context (``--keep -1`` keeps it)."""
        self.n_prompt = n

    def set_seq_logits(self, seq: int, logits: np.ndarray, record: int) -> None:
        """A decode call left ``logits`` for sequence ``seq`` (record ``record``)."""
        if seq == 0:
            self.logits_memory.set(logits, record, self.n_past)
        else:
            self.branches[seq].logits, self.branches[seq].record = logits, record

    def observe_off_thread(self, on: bool) -> None:
        """Each step's views on a worker thread while the next decode runs (overlap.py);
        ``overlap.settle()`` waits until every record so far is complete."""
        self.overlap.start(self.observers) if on else self.overlap.stop()

    # -- the prompt ----------------------------------------------------------------------------
    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]:
        """Decode a prompt (after what is already in the context), split into n_batch calls."""
        recs = prompt.prefill(self, tokens, reused=reused)
        self.gen_start = self.n_past
        return recs

    def sync_prompt(self, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]:
        """Make the context hold exactly ``tokens``, re-using the longest common prefix already
        cached (prompt/prefix caching) and prefilling only the rest."""
        recs = prompt.sync_prompt(self, tokens, reuse=reuse)
        self.gen_start = self.n_past  # a new turn: its prompt is history, the grammar starts
        return recs

    def truncate(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of sequence 0 (``llama_memory_seq_rm``)."""
        prompt.truncate(self, n_keep)

    # -- sample --------------------------------------------------------------------------------
    @property
    def generated(self) -> list[int]:
        """The tokens generated (or forced) in this turn: what the grammar has accepted."""
        toks = self.tokens
        return toks[min(self.gen_start, len(toks)) :]

    def new_chain(self, seed: int) -> SamplerChain:
        """A sampler chain for one more sequence (a fork), with its own seeded RNGs."""
        return SamplerChain(self.info.n_vocab, seed, self.model.vocab, self.n_ctx)

    def gate_decodes(self, gate: Callable[[], AbstractContextManager[object]] | None) -> None:
        """Enter ``gate`` around each llama_decode no observer watches (None: nothing)."""
        self.decode_gate = gate

    def use_settings(self, settings: SamplerSettings) -> None:
        """From now on sample with ``settings`` (a whole new object, never changed in place:
        a pick on the decode thread reads the old settings or the new ones, not half of each)."""
        settings.validate()
        self.settings = settings

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult:
        """Run the sampler chain on the current logits without advancing the RNG."""
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        return self.chain.run(
            self.logits,
            settings or self.settings,
            commit=False,
            history=self.tokens,
            generated=self.generated,
        )

    def sample(self, force: int | None = None) -> Sampled:
        """Stages 5 and 6 for sequence 0: sample (or take ``force``) from the current logits,
        note the pick on the record that produced them, check for an end-of-generation token
        (see :func:`sequences.sample`)."""
        return sequences.sample(self, 0, force)

    def ensure_logits(self) -> None:
        """After a rewind past the kept logits, decode the last token again to get them back."""
        if self.n_past == 0:
            raise TokenstepError("the context is empty: send a prompt first.")
        last = self.tokens[-1]
        # the same token comes back at the same index: its pick stays in the record
        prompt.truncate(self, self.n_past - 1, picks_from=self.n_past + 1)
        prompt.prefill(self, [last])  # not a new prompt: the turn's start stays

    # -- feed back -----------------------------------------------------------------------------
    def feed(self, token: int) -> StepRecord | None:
        """Stage 7: decode one token at the next position; its K/V become one new cell.

        When the context is full, ``--context-full stop`` ends generation (None, with
        ``stop_reason``) and ``shift`` first forgets the oldest half (see :meth:`context_shift`)."""
        made = None
        if self.n_past + 1 > self.n_ctx:
            if self.config.context_full != "shift" or self.branches:
                self.stop_reason = "context full"
                return None
            made = self.context_shift()
            if made is None:
                return None
        paths.make_room(self, 1)
        prompt.keep_in_order(self, 1)  # a hole under sequence 0 would take this token early
        pos = self.kv.last_pos(0) + 1
        call = DecodeCall(
            [BatchToken(token, pos, (0,), True)], ubatch_chunks(1, self.config.n_ubatch)
        )
        return decode(self, call, shift=made)

    def step(self, force: int | None = None) -> StepRecord | None:
        """One turn of the loop: sample, then decode. None when generation stopped
        (``stop_reason`` says why: end of generation or context full)."""
        return loop.advance(self, force).record

    def generate(self, n: int) -> list[StepRecord]:
        """Sample up to ``n`` tokens after a prefill. Each is decoded except the last, which is
        only sampled (its K/V would be needed only for a token after it)."""
        return list(loop.generate(self, n))

    def rewind(self, n: int = 1) -> int:
        """Remove the last ``n`` tokens from the KV cache; returns how many were removed.
        Logits for the new last position come from memory, so nothing is recomputed."""
        n = max(0, min(n, self.n_past - 1))
        if n:
            self.truncate(self.n_past - n)  # the record notes the Rewind
            self.stop_reason = None
            self.gen_start = min(self.gen_start, self.n_past)
        return n

    def reset(self) -> None:
        self.overlap.settle()
        replay.clear(self.ctx, self.replay)
        self.run.note(Clear())
        for br in self.branches.values():
            br.chain.free()
        self.branches.clear()
        self.parked.clear()
        self.kv.clear()
        self.logits_memory.clear()
        self.surprise.clear()
        self.chain.restart(self.settings.seed)
        self.gen_start = 0
        self.stop_reason = None
        self.work.reset()  # the quadratic-wall counter counts one chat's decode calls

    # -- context full: shift -------------------------------------------------------------------
    def keep_count(self) -> int:
        """Tokens a context shift keeps (llama.cpp's ``--keep``; see shift.py)."""
        return shift.keep_count(self)

    def context_shift(self) -> ShiftEvent | None:
        """Forget the oldest half after ``--keep`` (see :func:`shift.context_shift`)."""
        ev = shift.context_shift(self)
        if ev is not None and self.gen_start > ev.n_keep:  # the turn's generated tokens moved
            self.gen_start = max(ev.n_keep, self.gen_start - ev.n_discard)
        return ev

    # -- several sequences ---------------------------------------------------------------------
    @property
    def seq_ids(self) -> list[int]:
        """Live sequences: 0 and every fork."""
        return [0, *sorted(self.branches)]

    def seq_logits(self, seq: int) -> np.ndarray | None:
        return self.logits if seq == 0 else self.branches[seq].logits

    def fork(self, src: int = 0) -> int:
        """Copy sequence ``src`` into a new seq_id (see :func:`sequences.fork`)."""
        return sequences.fork(self, src)

    def drop_seq(self, seq: int) -> None:
        """Forget a forked sequence: its own cells are freed, shared ones stay for the others."""
        sequences.drop_seq(self, seq)

    def step_seqs(self, force: dict[int, int] | None = None) -> StepRecord | None:
        """One turn for every live sequence in ONE ``llama_decode`` (see
        :func:`sequences.step_seqs`). None when every sequence has stopped."""
        return sequences.step_seqs(self, force)

    # -- exactness -----------------------------------------------------------------------------
    def verify_last(self, mode: str = "batched", seq: int = 0) -> VerifyResult:
        """Recompute the current context of ``seq`` in a separate context that shares no cells
        with this one and compare its last logits row with the cached step's (see verify.py).
        Call it on the thread that owns the engine: it runs llama_decode on a second context."""
        if self._verifier is None:
            from .verify import Verifier  # a second context's machinery: not at start-up

            self._verifier = Verifier(self)
        return self._verifier.check(mode, seq)

    def close(self) -> None:
        getattr(self, "overlap", Overlap()).stop()  # the worker first: it may still be noting
        context = getattr(self, "context", None)
        if context is not None and context.ctx:
            if self._verifier is not None:
                self._verifier.close()
                self._verifier = None
            for br in self.branches.values():
                br.chain.free()
            self.branches.clear()
            self.batch.free()
            self.chain.free()
            context.free()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:

    def _is_a_backend(engine: Engine) -> Backend:
        return engine  # mypy checks that Engine satisfies the Backend protocol
