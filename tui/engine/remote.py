"""A model that lives elsewhere: the :class:`~tui.engine.backend.Backend` seam over llama-server.

One token per request: ``POST /completion`` with the whole context as token ids, ``n_predict: 1``
and ``n_probs: K``; the server evaluates what its slot's cache lacks and answers with the top K
of the next position (see ``remote_step``). The loop (``loop.advance``) runs on this backend as
on the local Engine: sample from the last answer, then feed the token, which is the next request.
A rewind or a forced token simply sends the shorter or forced prefix next time; the server reuses
what its cache still holds and ``timings.cache_n`` says how much that was.

Two picks: tokenstep's own llama.cpp chain and seeded RNG on the server's top K (the default),
or the server's own pick from the same request (its RNG restarts at every request).

Panes that need a local context (KV cells, attention, graph, verify, forks, the lens) read
:attr:`RemoteBackend.capabilities` and say why they are empty.
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

from .backend import Capabilities
from .batch import BatchToken, DecodeCall
from .context import EngineConfig
from .errors import ContextFullError, TokenstepError, one_line
from .kvcache import KVLayout, KVMirror
from .logits import TOP_N, LogitsMemory
from .model import ModelInfo
from .records import RecordLog
from .remote_http import DEFAULT_TIMEOUT_S, ServerClient, ServerError
from .remote_step import EOG_NAMES, PICKS, ServerStep, chain_exactness, fill_row
from .sampling import ChainResult, SamplerChain, SamplerSettings, top_stats
from .step import Candidate, PrefillTurn, Sampled, ShiftEvent, StepRecord
from .trace import record_to_dict
from .work import WorkCounter

if TYPE_CHECKING:
    from .backend import Backend
    from .verify import VerifyResult

DEFAULT_N_PROBS = 100
SAMPLERS = ["top_k", "top_p", "min_p", "temperature"]  # tokenstep's chain, in llama.cpp's order


def remote_capabilities(url: str) -> Capabilities:
    return Capabilities(
        f"the server at {url}",
        kv_cells=False,
        attention=False,
        graph=False,
        verify=False,
        fork=False,
        full_vocab=False,
        context_shift=False,
        lens=False,
    )


class RemoteVocab:
    """The server's vocabulary: ``/tokenize`` (with pieces) and ``/detokenize``, cached."""

    def __init__(self, client: ServerClient, n_vocab: int) -> None:
        self.client = client
        self.n_vocab = n_vocab
        self._pieces: dict[int, bytes] = {}
        self.eog_ids: set[int] = set()

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        if not text:
            return []
        body = {
            "content": text,
            "add_special": add_special,
            "parse_special": parse_special,
            "with_pieces": True,
        }
        out: list[int] = []
        for item in self.client.post("/tokenize", body).body.get("tokens", []):
            tok, piece = int(item["id"]), item.get("piece", "")
            self.learn(tok, piece)
            out.append(tok)
        return out

    def learn(self, token: int, piece: str | list[int] | bytes) -> None:
        """Remember a token's bytes: the server sends text, or a list of bytes when the piece
        is not valid UTF-8 on its own."""
        if isinstance(piece, str):
            data = piece.encode("utf-8")
        else:
            data = bytes(piece)
        self._pieces[token] = data

    def piece(self, token: int) -> bytes:
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        if not 0 <= token < self.n_vocab:
            raise TokenstepError(
                f"token id {token} is outside the vocabulary (0..{self.n_vocab - 1})."
            )
        text = self.client.post("/detokenize", {"tokens": [token]}).body.get("content", "")
        self._pieces[token] = str(text).encode("utf-8")
        return self._pieces[token]

    def text(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return token in self.eog_ids


def _model_info(
    url: str, props: dict[str, Any], meta: dict[str, Any], vocab: RemoteVocab
) -> ModelInfo:
    path = str(props.get("model_path") or props.get("model_alias") or url)
    eos_text = props.get("eos_token") or ""
    bos_text = props.get("bos_token") or ""
    names = [n for n in dict.fromkeys([eos_text, *EOG_NAMES]) if n]
    toks = vocab.tokenize("".join(names), add_special=False, parse_special=True)
    pieces = {vocab.piece(t).decode("utf-8", "replace"): t for t in toks}
    vocab.eog_ids = {t for name, t in pieces.items() if name in names}
    eos = pieces.get(eos_text, -1)
    bos_toks = vocab.tokenize(bos_text, add_special=False, parse_special=True) if bos_text else []
    n_vocab = int(meta.get("n_vocab") or vocab.n_vocab)
    return ModelInfo(
        path=path,
        arch="?",
        name=one_line(os.path.basename(path).removesuffix(".gguf")),
        desc=one_line(f"served by llama-server at {url}"),
        quant=one_line(str(props.get("model_ftype") or meta.get("ftype") or "?")),
        size_bytes=int(meta.get("size") or 0),
        n_params=int(meta.get("n_params") or 0),
        n_vocab=n_vocab,
        n_layer=0,
        n_head=0,
        n_head_kv=0,
        n_embd=int(meta.get("n_embd") or 0),
        head_dim_k=0,
        head_dim_v=0,
        n_ff=0,
        n_ctx_train=int(meta.get("n_ctx_train") or 0),
        n_swa=0,
        vocab_type="?",
        bos=bos_toks[0] if len(bos_toks) == 1 else -1,
        eos=eos,
        eot=-1,
        eog_ids=sorted(vocab.eog_ids),
        chat_template=props.get("chat_template") or None,
        add_bos=False,  # the chat template writes its own markers; ids are sent as they are
    )


class RemoteBackend:
    """llama-server, stepped one request per token. Not thread-safe (one worker owns it)."""

    def __init__(
        self,
        url: str,
        settings: SamplerSettings | None = None,
        *,
        n_probs: int = DEFAULT_N_PROBS,
        pick: str = "tokenstep",
        slot: int = 0,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if n_probs < 1:
            raise TokenstepError(f"--n-probs must be 1 or more, not {n_probs}.")
        if pick not in PICKS:
            raise TokenstepError(f"--pick must be one of {', '.join(PICKS)}, not {pick!r}.")
        self.client = ServerClient(url, timeout)
        self.url = self.client.url
        self.settings = settings or SamplerSettings()
        self.settings.validate()
        self.n_probs, self.pick, self.slot = n_probs, pick, slot
        self._capabilities = remote_capabilities(self.url)
        self.props = self._handshake()
        meta = self._model_meta()
        dgs = self.props.get("default_generation_settings") or {}
        self.n_ctx = int(dgs.get("n_ctx") or meta.get("n_ctx") or 0)
        self.vocab = RemoteVocab(self.client, int(meta.get("n_vocab") or 0))
        self.info = _model_info(self.url, self.props, meta, self.vocab)
        if self.info.n_vocab <= 0 or self.n_ctx <= 0:
            raise ServerError(f"{self.url} did not say its vocabulary or context size.")
        self.vocab.n_vocab = self.info.n_vocab
        self.config = EngineConfig(n_ctx=self.n_ctx, n_batch=0, n_ubatch=0, n_seq_max=1)
        self.flash_attn_resolved = "server's setting"
        self.chain = SamplerChain(self.info.n_vocab, self.settings.seed)
        self.kv = KVMirror(self.n_ctx)  # the tokens the server's slot should hold (no cells)
        self.layout = KVLayout(0, 0, 0, 1, 1)  # nothing known: no cells here
        self.kv_reports: list[Any] = []
        self.kv_bytes_used = self.kv_bytes_allocated = 0
        self.records = RecordLog(lambda rec: record_to_dict(self, rec))
        self.logits_memory = LogitsMemory()
        self.stop_reason: str | None = None
        self.work = WorkCounter()
        self.turns: list[PrefillTurn] = []
        self.shifts: list[ShiftEvent] = []
        self.branches: dict[int, Any] = {}
        self.n_prompt = 0
        self._sent: list[int] = []  # the prompt of the last answered request (the slot's cache)
        self._full_top: dict[int, tuple[list[int], list[float]]] = {}  # record -> all K (ids, lp)

    # -- connecting ------------------------------------------------------------------------------
    def _handshake(self) -> dict[str, Any]:
        """``GET /health`` (503 while the model loads), then ``GET /props``."""
        health = self.client.get("/health").body
        if health.get("status") not in ("ok", "no slot available"):
            raise ServerError(f"{self.url} answered /health without status ok: not llama-server?")
        props = self.client.get("/props").body
        if "default_generation_settings" not in props:
            raise ServerError(
                f"{self.url} answered /props without default_generation_settings: it does not "
                "look like llama-server."
            )
        return props

    def _model_meta(self) -> dict[str, Any]:
        """``GET /v1/models``: n_vocab, n_ctx_train, size (one model per server)."""
        try:
            data = self.client.get("/v1/models").body.get("data") or []
        except ServerError:
            return {}
        meta = data[0].get("meta") if data and isinstance(data[0], dict) else None
        return meta if isinstance(meta, dict) else {}

    # -- state -----------------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

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
    def flash_attn_note(self) -> str | None:
        return None

    @property
    def seq_ids(self) -> list[int]:
        return [0]

    def keep_count(self) -> int:
        return 0

    def exactness(self, settings: SamplerSettings | None = None) -> str | None:
        """Why tokenstep's pick on the current top K may differ from the full vocabulary."""
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if rec is None or not rec.top:
            return None
        probs = [c.p for c in self._top_all(rec)]
        return chain_exactness(settings or self.settings, probs, self.info.n_vocab)

    # -- one request -----------------------------------------------------------------------------
    def _body(self, prompt: list[int], reuse: bool) -> dict[str, Any]:
        s = self.settings
        return {
            "prompt": prompt,
            "n_predict": 1,
            "n_probs": self.n_probs,
            "cache_prompt": reuse,
            "id_slot": self.slot,
            "return_tokens": True,
            "timings_per_token": True,
            "samplers": SAMPLERS,
            "temperature": 0.0 if s.is_greedy else s.temp,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "seed": s.seed,
            "repeat_penalty": 1.0,
            "n_keep": 0,
        }

    def _request(
        self, new: list[int], *, phase: str, reuse: bool = True, reused_hint: int = 0
    ) -> StepRecord:
        """Send the context plus ``new`` and record what came back for the next position."""
        before = self.tokens
        prompt = before + new
        if len(prompt) > self.n_ctx:
            raise ContextFullError(
                f"the prompt needs {len(prompt)} tokens but the server's slot holds "
                f"{self.n_ctx}; use a shorter prompt or a larger -c on the server."
            )
        reply = self.client.post("/completion", self._body(prompt, reuse))
        body = reply.body
        probs = body.get("completion_probabilities") or []
        top = (probs[0].get("top_logprobs") if probs else None) or []
        if not top:
            raise ServerError(
                f"{self.url} sent no top_logprobs for n_probs {self.n_probs}; it does not "
                "look like llama-server."
            )
        t = body.get("timings") or {}
        cache_n = int(t.get("cache_n", 0))
        expected = 0
        while expected < min(len(self._sent), len(prompt) - 1) and (
            self._sent[expected] == prompt[expected]
        ):
            expected += 1
        self._sent = prompt
        picks = body.get("tokens") or []
        step = ServerStep(
            url=self.url,
            slot=int(body.get("id_slot", self.slot)),
            n_probs=self.n_probs,
            n_top=len(top),
            n_vocab=self.info.n_vocab,
            mass=0.0,
            prompt_tokens=len(prompt),
            prompt_n=int(t.get("prompt_n", len(prompt) - cache_n)),
            cache_n=cache_n,
            tokens_cached=int(body.get("tokens_cached", 0)),
            prompt_ms=float(t.get("prompt_ms", 0.0)),
            predicted_ms=float(t.get("predicted_ms", 0.0)),
            round_trip_ms=reply.round_trip_ms,
            json_ms=reply.json_ms,
            server_pick=int(picks[0]) if picks else None,
            pick_settings=self.settings.to_dict(),
            cache_lost=reuse and cache_n < expected,
            pick=self.pick,
        )
        ids = [int(c["id"]) for c in top]
        for c in top:
            self.vocab.learn(int(c["id"]), c.get("bytes") or c.get("token", ""))
        row, step.mass = fill_row(ids, [float(c["logprob"]) for c in top], self.info.n_vocab)
        index = len(self.records)
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
        _top, p_top, rec.entropy = top_stats(row, TOP_N)  # entropy: an upper bound (even rest)
        rec.top = [
            Candidate(i, self.vocab.piece(i), float(row[i]), p)
            for i, p in zip(_top.tolist(), p_top.tolist(), strict=True)
        ]
        self._full_top[index] = (ids, [float(c["logprob"]) for c in top])
        self.logits_memory.set(row, index, self.n_past)
        self.records.append(rec)
        self.work.add(index, step.prompt_n, [self.n_past], step.prompt_ms, phase)
        self.stop_reason = None
        return rec

    def _top_all(self, rec: StepRecord) -> list[Candidate]:
        """All K candidates of a record (best first), with their exact probabilities."""
        ids, lps = self._full_top.get(rec.index, ([], []))
        return [Candidate(i, b"", lp, math.exp(lp)) for i, lp in zip(ids, lps, strict=True)]

    # -- the loop --------------------------------------------------------------------------------
    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]:
        if not tokens:
            raise TokenstepError("the prompt is empty: there is nothing to decode.")
        if self.n_past == 0:
            self.n_prompt = len(tokens)
        phase = "prefill" if len(tokens) > 1 else "decode"
        return [self._request(list(tokens), phase=phase, reused_hint=reused)]

    def sync_prompt(self, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]:
        common = 0
        have = self.tokens
        limit = min(len(have), len(tokens))
        while common < limit and have[common] == tokens[common]:
            common += 1
        common = min(common, len(tokens) - 1)
        self._truncate(common)
        t0 = time.perf_counter()
        rec = self._request(list(tokens[common:]), phase="prefill", reuse=reuse)
        assert rec.server is not None
        self.turns.append(
            PrefillTurn(
                reused=rec.server.cache_n,
                computed=rec.server.prompt_n,
                prefill_ms=rec.server.prompt_ms or (time.perf_counter() - t0) * 1000.0,
                records=(rec.index, rec.index + 1),
            )
        )
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
        last = self.tokens[-1]
        self._truncate(self.n_past - 1)
        self._request([last], phase="decode")

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult:
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        return self.chain.run(self.logits, settings or self.settings, commit=False)

    def sample(self, force: int | None = None) -> Sampled:
        """Stages 5 and 6: tokenstep's chain on the top K (or the server's own pick)."""
        if self.logits is None or self.logits_record is None:
            self.ensure_logits()
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if self.pick == "server" and force is None and rec is not None and rec.server:
            if rec.server.pick_settings != self.settings.to_dict():
                last = self.tokens[-1]  # the settings changed: ask the server again with them
                self._truncate(self.n_past - 1)
                self._request([last], phase="decode")
                rec = self.records.get(self.logits_record or 0)
        logits = self.logits
        assert logits is not None
        settings = self.settings
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, result = force, self.chain.run(logits, settings, commit=False)
        elif self.pick == "server" and rec is not None and rec.server is not None:
            result = self.chain.run(logits, settings, commit=False)
            token = (
                rec.server.server_pick if rec.server.server_pick is not None else result.selected
            )
        else:
            result = self.chain.run(logits, settings, commit=True)
            token = result.selected
        eog = self.vocab.is_eog(token)
        if rec is not None:
            rec.note_pick(0, token, result, eog, forced=force is not None, settings=settings)
            if rec.server is not None:
                rec.server.pick = "forced" if force is not None else self.pick
                rec.server.approx = self.exactness(settings)
        if eog:
            self.stop_reason = "end of generation"
        return Sampled(0, token, result, logits, rec, force is not None, eog)

    def sample_next(self, force: int | None = None) -> int:
        return self.sample(force).token

    def feed(self, token: int) -> StepRecord | None:
        if self.n_past + 1 > self.n_ctx:
            self.stop_reason = "context full"
            return None
        return self._request([token], phase="decode")

    def rewind(self, n: int = 1) -> int:
        n = max(0, min(n, self.n_past - 1))
        if n:
            self._truncate(self.n_past - n)
            self.stop_reason = None
        return n

    def reset(self) -> None:
        self.kv.clear()
        self.logits_memory.clear()
        self.chain.reseed(self.settings.seed)
        self.stop_reason = None
        self.work.reset()

    # -- what a server cannot do -----------------------------------------------------------------
    def _refuse(self, what: str) -> TokenstepError:
        return TokenstepError(f"{what} {self.capabilities.missing(what)}.")

    def fork(self, src: int = 0) -> int:
        raise self._refuse("fork")

    def drop_seq(self, seq: int) -> None:
        raise self._refuse("fork")

    def step_seqs(self, force: dict[int, int] | None = None) -> StepRecord | None:
        raise self._refuse("fork")

    def verify_last(self, mode: str = "batched", seq: int = 0) -> VerifyResult:
        raise self._refuse("verify")

    def context_shift(self) -> None:
        return None

    def close(self) -> None:
        self.client.close()
        chain = getattr(self, "chain", None)
        if chain is not None:
            chain.free()
            self.chain = None  # type: ignore[assignment]

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:

    def _is_a_backend(backend: RemoteBackend) -> Backend:
        return backend  # mypy checks that RemoteBackend satisfies the Backend protocol
