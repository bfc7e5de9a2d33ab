"""A model that lives elsewhere: the :class:`~tui.engine.run.backend.Backend` seam over llama-server.

One token per request: ``POST /completion`` with the context as token ids, ``n_predict: 1``,
``n_probs: K`` (and ``--api-key`` as a bearer token); the server evaluates what its slot's cache
lacks and answers with the next position's top K (``remote_step``). ``loop.advance`` runs here
as on the local Engine; a rewind or a forced token sends the shorter or forced prefix next,
and ``timings.cache_n`` says how much the server reused. A prefill is the same request
(``n_predict: 0`` still samples on this llama-server). The pick (tokenstep's own chain and
seeded RNG on the top K by default, or the server's own) is :mod:`remote_pick`'s. Panes
that need a local context read :attr:`RemoteBackend.capabilities` and say why they are empty;
DRY and grammars need the vocabulary's text, loaded with ``-m PATH`` (``remote_chain``) or
refused in one sentence.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ..model.context import EngineConfig
from ..model.errors import ContextFullError, TokenstepError
from ..model.kvcache import KVLayout, KVMirror
from ..model.work import WorkCounter
from ..record.run_record import Clear, Decode, RunRecord, Turn
from ..record.surprise import SurpriseLog
from ..run.batch import BatchToken, DecodeCall
from ..run.logits import TOP_N, LogitsMemory
from ..run.overlap import Overlap
from ..run.records import RecordLog
from ..run.step import Candidate, PrefillTurn, ShiftEvent, StepRecord
from ..run.trace import record_to_dict
from ..sampler.sampling import SamplerChain, SamplerSettings, top_stats
from ..wire.remote_http import DEFAULT_TIMEOUT_S, ServerClient, ServerError
from ..wire.remote_step import PICKS, ServerStep, ask_native, fill_row
from .remote_chain import chain_for
from .remote_pick import RemotePick
from .remote_vocab import RemoteVocab, handshake, model_info, model_meta, remote_capabilities

if TYPE_CHECKING:
    from ..model.local_vocab import LocalVocab
    from ..model.model import ModelInfo
    from ..run.backend import Backend, ServerFacts

DEFAULT_N_PROBS = 100


class RemoteBackend(RemotePick):
    """llama-server, stepped one request per token. Not thread-safe (one worker owns it)."""

    info: ModelInfo  # set by _connect, as n_ctx, vocab and props
    n_ctx: int
    vocab: Any
    props: dict[str, Any]
    api: str = "llama-server"  # its native /completion (OpenAIBackend: "openai")
    ids_prompt: bool = True  # /completion takes token ids

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
        self.surprise = SurpriseLog()  # prompt scores: none over HTTP (no prompt rows come)
        self.run = RunRecord()  # the one record of the run (run_record.py): panes read it
        self.score_prompt = False
        self.logits_memory = LogitsMemory()
        self.stop_reason: str | None = None
        self.work = WorkCounter()
        self.overlap = Overlap()  # inline: a request holds no llama_decode to overlap with
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

    # -- one request -----------------------------------------------------------------------------
    def _request(
        self,
        new: list[int],
        *,
        phase: str,
        reuse: bool = True,
        reused_hint: int = 0,
        keep: int | None = None,
        picks_from: int | None = None,
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
        self._truncate(n_keep, picks_from)
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
        purpose = "prompt" if phase == "prefill" else "step"
        self.run.note(Decode(index, purpose, phase, call.n_tokens, step.prompt_ms, self.n_past))
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

    def ensure_logits(self) -> None:
        """After a rewind past the remembered rows: ask for the shorter prefix again."""
        if self.n_past == 0:
            raise TokenstepError("the context is empty: send a prompt first.")
        self._again()

    def _again(self) -> StepRecord:
        """The last token sent again: it comes back at its index, so its pick stays."""
        n = self.n_past
        return self._request([self.tokens[-1]], phase="decode", keep=n - 1, picks_from=n + 1)

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
            self._truncate(self.n_past - n)  # the record notes the Rewind
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

    @property
    def server(self) -> RemoteBackend:
        """This backend: its URL, API, slot and pick are the server facts the panes read."""
        return self

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:

    def _is_a_backend(backend: RemoteBackend) -> Backend:
        return backend  # mypy checks that RemoteBackend satisfies the Backend protocol

    def _has_server_facts(backend: RemoteBackend) -> ServerFacts:
        return backend
