"""A model that lives elsewhere: the :class:`~tui.engine.backend.Backend` seam over llama-server.

One token per request: ``POST /completion`` with the context as token ids, ``n_predict: 1``,
``n_probs: K`` (and ``--api-key`` as a bearer token); the server evaluates what its slot's cache
lacks and answers with the next position's top K (``remote_step``). ``loop.advance`` runs here
as on the local Engine; a rewind or a forced token sends the shorter or forced prefix next,
and ``timings.cache_n`` says how much the server reused. A prefill is the same request
(``n_predict: 0`` still samples on this llama-server). The pick is tokenstep's own chain and
seeded RNG on the top K (default) or the server's own (its RNG restarts every request). Panes
that need a local context read :attr:`RemoteBackend.capabilities` and say why they are empty;
DRY and grammars need the vocabulary's text, loaded with ``-m PATH`` (``remote_chain``) or
refused in one sentence.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ..batch import BatchToken, DecodeCall
from ..logits import TOP_N, LogitsMemory
from ..model.context import EngineConfig
from ..model.errors import ContextFullError, TokenstepError
from ..model.kvcache import KVLayout, KVMirror
from ..model.work import WorkCounter
from ..records import RecordLog
from ..run_record import Clear, Decode, Rewind, RunRecord, Turn
from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings, top_stats
from ..step import Candidate, PrefillTurn, Sampled, ShiftEvent, StepRecord
from ..surprise import SurpriseLog
from ..trace import record_to_dict
from ..wire.remote_http import DEFAULT_TIMEOUT_S, ServerClient, ServerError
from ..wire.remote_step import PICKS, ServerStep, ask_native, chain_exactness, fill_row, top_probs
from .remote_chain import NoLocalContext, chain_for, pick_exactness
from .remote_vocab import RemoteVocab, handshake, model_info, model_meta, remote_capabilities

if TYPE_CHECKING:
    from ..backend import Backend
    from ..model.local_vocab import LocalVocab
    from ..model.model import ModelInfo

DEFAULT_N_PROBS = 100


class RemoteBackend(NoLocalContext):
    """llama-server, stepped one request per token. Not thread-safe (one worker owns it)."""

    info: ModelInfo  # set by _connect, as n_ctx, vocab and props
    n_ctx: int
    vocab: Any
    props: dict[str, Any]

    def __init__(
        self,
        url: str,
        settings: SamplerSettings | None = None,
        *,
        n_probs: int = DEFAULT_N_PROBS,
        pick: str = "tokenstep",
        slot: int = 0,
        timeout: float = DEFAULT_TIMEOUT_S,
        local_vocab: LocalVocab | None = None,
        check_chain: bool = False,
        api_key: str | None = None,
    ) -> None:
        """``local_vocab``: the served GGUF's vocabulary (-m) for DRY and grammars (owned).
        ``check_chain``: ask the server's own post-chain probabilities beside each pick."""
        self.local_vocab = local_vocab
        self.check_chain = check_chain
        if n_probs < 1:
            raise TokenstepError(f"--n-probs must be 1 or more, not {n_probs}.")
        if pick not in PICKS:
            raise TokenstepError(f"--pick must be one of {', '.join(PICKS)}, not {pick!r}.")
        self.client = self._client(url, timeout, api_key)
        self.url = self.client.url
        self.settings = settings or SamplerSettings()
        self.settings.validate()
        self.n_probs, self.pick, self.slot = n_probs, pick, slot
        self._capabilities = remote_capabilities(self.url)
        self.chain: SamplerChain | None = None
        self._connect()
        self.config = EngineConfig(n_ctx=self.n_ctx, n_batch=0, n_ubatch=0, n_seq_max=1)
        self.flash_attn_resolved = "unknown (the server's -fa)"
        self.chain, self._capabilities = chain_for(
            self.url, self.info.n_vocab, self.n_ctx, self.settings, self.vocab, local_vocab
        )
        self.info = dataclasses.replace(self.info, eog_ids=sorted(self.vocab.eog_ids))
        self.gen_start = 0  # where this turn's generated tokens begin (the grammar sees those)
        self.kv = KVMirror(self.n_ctx)  # the tokens the server's slot should hold (no cells)
        self.layout = KVLayout(0, 0, 0, 1, 1)  # nothing known: no cells here
        self.kv_reports: list[Any] = []
        self.kv_bytes_used = self.kv_bytes_allocated = 0
        self.records = RecordLog(lambda rec: record_to_dict(self, rec))
        self.surprise = SurpriseLog()  # none kept over HTTP (only a row's top K): no guesses
        self.run = RunRecord()  # the one record of the run (run_record.py): panes read it
        self.score_prompt = False
        self.logits_memory = LogitsMemory()
        self.stop_reason: str | None = None
        self.work = WorkCounter()
        self.turns: list[PrefillTurn] = []
        self.shifts: list[ShiftEvent] = []
        self.branches: dict[int, Any] = {}
        self.observers: list[Any] = []  # no eval callback: the graph runs on the server
        self.n_prompt = 0
        self._sent: list[int] = []  # the prompt of the last answered request (the slot's cache)
        self._pending: tuple[int, int | None, int] | None = None  # a pick whose feed failed

    def _client(self, url: str, timeout: float, api_key: str | None) -> ServerClient:
        return ServerClient(url, timeout, api_key=api_key)

    def _connect(self) -> None:
        """The handshake: the context size, the vocabulary and the model's facts."""
        self.props = handshake(self.client, self.slot)
        meta = model_meta(self.client)
        self.n_ctx = int(self.props["default_generation_settings"]["n_ctx"])  # checked: >= 1
        self.vocab = RemoteVocab(self.client, int(meta["n_vocab"]))  # checked: 1..MAX_VOCAB
        self.info = model_info(self.url, self.props, meta, self.vocab)

    def _ask(self, prompt: list[int], reuse: bool) -> tuple[ServerStep, list[tuple[int, bytes]]]:
        """One ``POST /completion``: the checked answer and each candidate's (id, bytes)."""
        return ask_native(self, prompt, reuse)

    # -- state -----------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        return self.kv.tokens(0)

    @property
    def n_past(self) -> int:
        return self.kv.count(0)

    @property
    def logits(self) -> Any:
        return self.logits_memory.logits

    @property
    def logits_record(self) -> int | None:
        return self.logits_memory.record

    @property
    def unsent_pick(self) -> int | None:
        """The token picked at this position whose request failed (the next step sends it
        again, so the seeded RNG does not advance twice); None when nothing is waiting."""
        pending = self._pending
        if pending is None or pending[:2] != (self.n_past, self.logits_record):
            return None
        return pending[2]

    def exactness(self, settings: SamplerSettings | None = None) -> str | None:
        """Why tokenstep's pick on the current top K may differ from the full vocabulary."""
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if rec is None or not rec.top:
            return None
        probs = top_probs(rec.server)
        return chain_exactness(settings or self.settings, probs, self.info.n_vocab)

    @property
    def generated(self) -> list[int]:
        """The tokens generated (or forced) in this turn: what the grammar has accepted."""
        toks = self.tokens
        return toks[min(self.gen_start, len(toks)) :]

    def _run(self, settings: SamplerSettings, *, commit: bool) -> ChainResult:
        """The chain on the filled top-K row, with the history penalties and DRY see and the
        turn's tokens the grammar has accepted, as the local engine runs it."""
        assert self.chain is not None and self.logits is not None
        return self.chain.run(
            self.logits, settings, commit=commit, history=self.tokens, generated=self.generated
        )

    # -- one request -----------------------------------------------------------------------------
    def _request(
        self,
        new: list[int],
        *,
        phase: str,
        reuse: bool = True,
        reused_hint: int = 0,
        keep: int | None = None,
    ) -> StepRecord:
        """Send the first ``keep`` tokens of the context (all by default) plus ``new`` and
        record what came back for the next position. The context changes only once the server
        has answered, so a fault leaves the conversation as it was."""
        n_keep = self.n_past if keep is None else keep
        prompt = self.tokens[:n_keep] + new
        if len(prompt) >= self.n_ctx:  # llama-server keeps one position to predict into
            raise ContextFullError(
                f"the prompt needs {len(prompt)} tokens but a prompt may fill {self.n_ctx - 1} of "
                f"the server's {self.n_ctx}; use a shorter prompt or a larger -c on the server."
            )
        step, top = self._ask(prompt, reuse)
        expected = 0  # the prefix the slot should still hold from our last request
        while expected < min(len(self._sent), len(prompt) - 1) and (
            self._sent[expected] == prompt[expected]
        ):
            expected += 1
        for tok, piece in top:
            self.vocab.learn(tok, piece)
        row, step.mass = fill_row(step.top_ids, step.top_logprobs, self.info.n_vocab)
        _top, p_top, entropy = top_stats(row, TOP_N)  # entropy: an upper bound (even rest)
        candidates = [  # every piece known before the context changes (a piece may ask again)
            Candidate(i, self.vocab.piece(i), float(row[i]), p)
            for i, p in zip(_top.tolist(), p_top.tolist(), strict=True)
        ]
        self._sent = prompt
        step.slot = step.slot if step.slot >= 0 else self.slot
        step.pick = self.pick
        step.cache_lost = reuse and step.server_timings and step.cache_n < expected
        cache_n = step.cache_n
        index = len(self.records)
        self._truncate(n_keep)
        start = self.kv.last_pos(0) + 1
        call = DecodeCall(
            [BatchToken(tok, start + i, (0,), i == len(new) - 1) for i, tok in enumerate(new)],
            [(0, len(new))],
        )
        for bt in call.tokens:
            self.kv.add(bt.id, bt.pos, (0,), index)
        rec = StepRecord(
            index,
            phase,
            call,
            step.prompt_ms,
            reused=cache_n if reuse else reused_hint,
            has_logits=True,
            n_ctx_tokens=self.n_past,
            kv_used=self.kv.used,
            server=step,
        )
        rec.entropy, rec.top = entropy, candidates
        self.logits_memory.set(row, index, self.n_past)
        self.records.append(rec)
        self.run.note(Decode(index, "prompt" if phase == "prefill" else "step", phase, call.n_tokens, step.prompt_ms))
        self.work.add(index, step.prompt_n, [self.n_past], step.prompt_ms, phase)
        self.stop_reason = None
        return rec

    # -- the loop --------------------------------------------------------------------------------
    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]:
        if not tokens:
            raise TokenstepError("the prompt is empty: there is nothing to decode.")
        if self.n_past == 0:
            self.n_prompt = len(tokens)
        phase = "prefill" if len(tokens) > 1 else "decode"
        recs = [self._request(list(tokens), phase=phase, reused_hint=reused)]
        self.gen_start = self.n_past
        return recs

    def sync_prompt(self, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]:
        common = 0
        have = self.tokens
        limit = min(len(have), len(tokens))
        while common < limit and have[common] == tokens[common]:
            common += 1
        common = min(common, len(tokens) - 1)
        t0 = time.perf_counter()
        rec = self._request(list(tokens[common:]), phase="prefill", reuse=reuse, keep=common)
        assert rec.server is not None
        ms = rec.server.prompt_ms or (time.perf_counter() - t0) * 1000.0
        turn = PrefillTurn(rec.server.cache_n, rec.server.prompt_n, ms, (rec.index, rec.index + 1))
        self.turns.append(turn)
        self.run.note(Turn(turn.reused, turn.computed, turn.prefill_ms, turn.records))
        self.gen_start = self.n_past  # a new turn: its prompt is history, the grammar starts
        return [rec]

    def _truncate(self, n_keep: int) -> None:
        if n_keep >= self.n_past:
            return
        positions = self.kv.positions(0)
        if n_keep == 0:
            self.kv.clear()
        else:
            self.kv.seq_rm(0, positions[n_keep], -1)
        self.logits_memory.truncate(n_keep)

    def ensure_logits(self) -> None:
        """After a rewind past the remembered rows: ask for the shorter prefix again."""
        if self.n_past == 0:
            raise TokenstepError("the context is empty: send a prompt first.")
        self._request([self.tokens[-1]], phase="decode", keep=self.n_past - 1)

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult:
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        return self._run(settings or self.settings, commit=False)

    def sample(self, force: int | None = None) -> Sampled:
        """Stages 5 and 6: tokenstep's chain on the top K (or the server's own pick)."""
        if self.logits is None or self.logits_record is None:
            self.ensure_logits()
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if self.pick == "server" and force is None and rec is not None and rec.server:
            if rec.server.pick_settings != self.settings.to_dict():
                # The settings changed since that answer: ask the server again with them.
                self._request([self.tokens[-1]], phase="decode", keep=self.n_past - 1)
                rec = self.records.get(self.logits_record or 0)
        logits = self.logits
        assert logits is not None
        settings = self.settings
        pending = self._pending
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, result = force, self._run(settings, commit=False)
        elif pending is not None and pending[:2] == (self.n_past, self.logits_record):
            # The last feed failed (the server was unreachable): retry the same pick, so a
            # fault does not advance the seeded RNG twice.
            token, result = pending[2], self._run(settings, commit=False)
        elif self.pick == "server" and rec is not None and rec.server is not None:
            result = self._run(settings, commit=False)
            token = (
                rec.server.server_pick if rec.server.server_pick is not None else result.selected
            )
        else:
            result = self._run(settings, commit=True)
            token = result.selected
        eog = self.vocab.is_eog(token)
        if rec is not None:
            rec.note_pick(0, token, result, eog, forced=force is not None, settings=settings)
            if rec.server is not None:
                rec.server.pick = "forced" if force is not None else self.pick
                rec.server.approx = self.exactness(settings) or pick_exactness(
                    settings, rec.server.top_ids, result, token
                )
                if self.check_chain and force is None:
                    from ..wire.remote_post import check_row

                    rec.server.post_chain, rec.server.post_note = check_row(
                        self, result, self.tokens
                    )
        if eog:
            self.stop_reason = "end of generation"
        return Sampled(0, token, result, logits, rec, force is not None, eog)

    def feed(self, token: int) -> StepRecord | None:
        if self.n_past + 1 >= self.n_ctx:  # the server refuses a prompt that fills its slot
            self.stop_reason = "context full"
            return None
        pending = (self.n_past, self.logits_record, token)
        try:
            rec = self._request([token], phase="decode")
        except ServerError:
            self._pending = pending
            raise
        self._pending = None
        return rec

    def rewind(self, n: int = 1) -> int:
        n = max(0, min(n, self.n_past - 1))
        if n:
            self._truncate(self.n_past - n)
            self.run.note(Rewind(n, self.n_past))
            self.gen_start = min(self.gen_start, self.n_past)
            self.stop_reason = None
        return n

    def reset(self) -> None:
        self.kv.clear()
        self.run.note(Clear())
        self.logits_memory.clear()
        if self.chain is not None:
            self.chain.reseed(self.settings.seed)
        self.gen_start = 0
        self.stop_reason = None
        self.work.reset()

    def close(self) -> None:
        self.client.close()
        chain = getattr(self, "chain", None)
        if chain is not None:
            chain.free()
            self.chain = None
        if self.local_vocab is not None:
            self.local_vocab.close()
            self.local_vocab = None

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:

    def _is_a_backend(backend: RemoteBackend) -> Backend:
        return backend  # mypy checks that RemoteBackend satisfies the Backend protocol
