"""An OpenAI-compatible server (vLLM, SGLang, Ollama, llama-server's ``/v1``, a gateway),
stepped one ``POST /v1/completions`` per token, as :class:`~tui.engine.remote.remote.RemoteBackend`
steps llama-server's ``/completion`` (whose loop, rewinds and forced tokens it shares).

Each request sends the context, ``max_tokens: 1`` and ``logprobs: K``; tokenstep's chain runs
on the top K. Ids go as ``prompt`` where the server takes them (asked once at connect:
llama-server, vLLM and SGLang do, llama-cpp-python's server answers 422); over text, each step
checks ``usage.prompt_tokens`` and our tokenizer's ids against the ids held, and says when
they differ. Candidates come as ids and bytes or as texts mapped to ids (``openai_vocab``);
timings are the server's where it reports them, else the round trip. The API key
(``--api-key`` or ``$OPENAI_API_KEY``) lives only in the client's header.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import llama_cpp

from ..model import gguf_header, secret
from ..model.errors import TokenstepError, one_line
from ..model.info import facts
from ..model.local_vocab import PROBE_TEXT, check_same_vocab
from ..model.model import ModelInfo
from ..sampler.sampling import SamplerSettings
from ..wire.openai_reply import (
    COMPLETIONS,
    WHAT,
    OpenAICompletion,
    choose_model,
    read_model_list,
    read_openai_completion,
)
from ..wire.openai_vocab import FileVocab, PieceIndex, tokenizer_to_id
from ..wire.remote_http import ServerClient, ServerError
from ..wire.remote_reply import MAX_CTX, read_models
from ..wire.remote_step import ServerStep
from .remote import DEFAULT_TIMEOUT_S, RemoteBackend
from .remote_vocab import RemoteVocab, handshake, model_info

if TYPE_CHECKING:
    from ..model.local_vocab import LocalVocab

DEFAULT_OPENAI_N_PROBS = 20  # OpenAI's and vLLM's cap (vLLM: --max-logprobs, default 20)


def api_key_from(flag: str | None) -> str | None:
    """--api-key, else $OPENAI_API_KEY, else none; a key no HTTP header can carry is one
    sentence that does not repeat it."""
    key = flag or os.environ.get(secret.ENV) or None
    if key is not None:
        secret.add(key)
        problem = secret.header_problem(key)
        if problem is not None:
            raise TokenstepError(problem)
    return key


class OpenAIBackend(RemoteBackend):
    """One ``/v1/completions`` request per token. Not thread-safe (one worker owns it)."""

    def __init__(
        self,
        url: str,
        settings: SamplerSettings | None = None,
        *,
        n_probs: int = DEFAULT_OPENAI_N_PROBS,
        pick: str = "tokenstep",
        timeout: float = DEFAULT_TIMEOUT_S,
        local_vocab: LocalVocab | None = None,
        model: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self._model_name = model
        self._index: PieceIndex | None = None
        self.api = "openai"
        super().__init__(
            url,
            settings,
            n_probs=n_probs,
            pick=pick,
            timeout=timeout,
            local_vocab=local_vocab,
            api_key=api_key,  # the client's header holds it; nothing else does
        )
        self.__dict__["slot"] = None  # /v1 has no slots: the header names none

    def _client(self, url: str, timeout: float, api_key: str | None) -> ServerClient:
        return ServerClient(url, timeout, api_key=api_key, what=WHAT)

    def _connect(self) -> None:
        models = read_model_list(self.client.url, self.client.get("/v1/models").body)
        served = choose_model(self.client.url, models, self._model_name)
        self.model = served.id
        local = self.local_vocab
        url = self.client.url
        if local is not None:
            if served.n_vocab is not None and served.n_vocab != local.n_vocab:
                raise TokenstepError(
                    f"-m {local.path} is not the model the server at {url} serves: its "
                    f"vocabulary has {local.n_vocab:,} tokens and the server's {served.n_vocab:,}."
                )
            native = self._native_vocab()
            if native is not None:  # llama-server's /v1: the file must tokenize as it does
                check_same_vocab(local, native, url)
            else:
                self._check_served_tokenizer(local)
            self.vocab = FileVocab(local)
            self.info = _file_info(local, url, served.id)
            self.n_ctx = served.n_ctx or self.info.n_ctx_train or MAX_CTX
            self.props = {"model_alias": served.id}
        else:
            try:  # llama-server's /v1: its native /props and /tokenize give the ids
                props = self._llama_server_props()
                meta = read_models(url, self.client.get("/v1/models").body) if props else None
            except ServerError as exc:
                if "HTTP" not in str(exc) and "not JSON" not in str(exc):
                    raise  # nothing answers, a timeout: that sentence, not "no tokenizer"
                props = meta = None
            if props is None or meta is None:
                raise TokenstepError(
                    f"the server at {url} has no tokenizer tokenstep can reach (no /tokenize "
                    "of llama-server's): give the GGUF it serves with -m PATH (tokenstep loads "
                    "only its vocabulary)."
                )
            self.props = props
            self.n_ctx = int(self.props["default_generation_settings"]["n_ctx"])
            self.vocab = RemoteVocab(self.client, int(meta["n_vocab"]))
            self.info = model_info(url, self.props, meta, self.vocab)
        self.ids_prompt = self._takes_ids()
        if not self.ids_prompt and local is not None:
            self._check_text_tokenizer(local)

    def _check_text_tokenizer(self, local: LocalVocab) -> None:
        """A text-only server has no /tokenize, but counts our prompt (``usage.prompt_tokens``):
        the probe text must count as many tokens there as the -m file makes of it."""
        body = {"model": self.model, "prompt": PROBE_TEXT, "max_tokens": 1, "temperature": 0.0}
        reply = self.client.post(COMPLETIONS, body).body
        usage = reply.get("usage") if isinstance(reply, dict) else None
        theirs = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        mine = len(local.vocab.tokenize(PROBE_TEXT, add_special=True, parse_special=True))
        if isinstance(theirs, int) and theirs != mine:
            raise TokenstepError(
                f"-m {local.path} is not the model the server at {self.client.url} serves: the "
                f"same probe text is {mine} tokens here and {theirs} there."
            )

    def _check_served_tokenizer(self, local: LocalVocab) -> None:
        """vLLM's ``POST /tokenize`` (``{"model", "prompt"}`` -> ``{"tokens": [...]}``), where
        the server has one: the probe text must give the ids the -m file gives it. A server
        without it (404) or with another form is not asked more here."""
        body = {"model": self.model, "prompt": PROBE_TEXT, "add_special_tokens": False}
        try:
            reply = self.client.post("/tokenize", body).body
        except ServerError as exc:
            if "HTTP" not in str(exc) and "not JSON" not in str(exc):
                raise
            return
        theirs = reply.get("tokens") if isinstance(reply, dict) else None
        if not isinstance(theirs, list) or not all(type(t) is int for t in theirs):
            return
        mine = local.vocab.tokenize(PROBE_TEXT, add_special=False)
        if mine != theirs:
            pairs = enumerate(zip(mine, theirs, strict=False))
            at = next((i for i, (a, b) in pairs if a != b), min(len(mine), len(theirs)))
            here = mine[at] if at < len(mine) else "-"
            there = theirs[at] if at < len(theirs) else "-"
            raise TokenstepError(
                f"-m {local.path} is not the model the {WHAT} at {self.client.url} serves: the "
                f"same text tokenizes differently (its /tokenize, token {at}: id {here} here, "
                f"{there} there)."
            )

    def _llama_server_props(self) -> dict[str, Any] | None:
        """llama-server's checked ``/props`` where the server is one, else None. Asked first,
        before its ``/health``: vLLM answers ``/health`` 200 with an empty body and ``/props``
        404 (llama-server's ``/health`` is ``{"status": "ok"}``)."""
        try:
            props = self.client.get("/props").body
        except ServerError as exc:
            if "HTTP" not in str(exc) and "not JSON" not in str(exc):
                raise
            return None
        if not isinstance(props, dict) or "default_generation_settings" not in props:
            return None
        return handshake(self.client, 0)

    def _native_vocab(self) -> RemoteVocab | None:
        """llama-server's own /tokenize where the server is one (None elsewhere)."""
        try:
            if self._llama_server_props() is None:
                return None
            meta = read_models(self.client.url, self.client.get("/v1/models").body)
        except ServerError as exc:
            if "HTTP" not in str(exc) and "not JSON" not in str(exc):
                raise
            return None
        return RemoteVocab(self.client, int(meta["n_vocab"]))

    def _takes_ids(self) -> bool:
        """One request with a list of ids as ``prompt``: answered, the server takes ids; a
        refusal of ``prompt``'s type (400, 422, or llama-cpp-python's 500) means text only."""
        probe = self.vocab.tokenize("Hello", add_special=False) or [0]
        body = {"model": self.model, "prompt": probe[:1], "max_tokens": 1, "temperature": 0.0}
        try:
            self.client.post(COMPLETIONS, body)
        except ServerError as exc:
            said = str(exc)
            # llama-cpp-python's server answers a list of ids with HTTP 500 and pydantic's
            # "Input should be a valid string" at ('body', 'prompt', 'str').
            if "(HTTP 400)" in said or "(HTTP 422)" in said or "'prompt'" in said:
                return False
            raise
        return True

    def _body(self, prompt: list[int] | str) -> dict[str, Any]:
        """``max_tokens`` 1 and the top K; the sampler fields tokenstep's chain ignores
        (temperature 0 unless the server picks, when every field it reads is sent)."""
        s = self.settings
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": 1,
            "logprobs": self.n_probs,
            "temperature": 0.0,
            "stream": False,
            "echo": False,
        }
        if self.pick == "server":
            body.update(temperature=0.0 if s.is_greedy else s.temp, top_p=s.top_p, seed=s.seed)
            body.update(top_k=s.top_k, min_p=s.min_p)  # vLLM, SGLang, llama.cpp read these
            body.update(presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty)
        return body

    def _text_prompt(self, prompt: list[int]) -> str:
        ids = prompt[1:] if self.info.add_bos and prompt[:1] == [self.info.bos] else prompt
        return str(self.vocab.text(ids))

    def _ask(self, prompt: list[int], reuse: bool) -> tuple[ServerStep, list[tuple[int, bytes]]]:
        text = None if self.ids_prompt else self._text_prompt(prompt)
        try:
            reply = self.client.post(COMPLETIONS, self._body(prompt if text is None else text))
        except ServerError as exc:
            said = str(exc)
            if "(HTTP 400)" not in said or "logprobs" not in said or "than" not in said:
                raise
            # vLLM 0.32: "Requested sample logprobs of 101, which is greater than max allowed:
            # 100 (parameter=logprobs, value=101)"
            raise ServerError(
                f"the {WHAT} at {self.url} sends fewer candidates than --n-probs "
                f"{self.n_probs} asks for (vLLM's cap is its --max-logprobs, 20 unless it was "
                "started with more): pass a smaller --n-probs."
            ) from exc
        if self._index is None and not isinstance(self.vocab, RemoteVocab):
            self._index = tokenizer_to_id(self.vocab)
        n_prompt = len(prompt) if text is None else MAX_CTX  # over text: the server's own count
        c = read_openai_completion(
            self.url, reply.body, self.n_probs, self.info.n_vocab, self._to_id, n_prompt
        )
        if self.pick == "server" and c.server_pick is None:
            raise ServerError(
                f"the {WHAT} at {self.url} answered {COMPLETIONS} without a token tokenstep can "
                "read as its own pick, so --pick server has none to take; leave out --pick "
                "server to let tokenstep's chain pick."
            )
        t = c.timings
        cached = c.cached_tokens
        step = ServerStep(
            url=self.url,
            slot=0,
            n_probs=self.n_probs,
            n_top=len(c.top),
            n_vocab=self.info.n_vocab,
            mass=0.0,
            prompt_tokens=len(prompt),
            prompt_n=int(t["prompt_n"]) if t else len(prompt) - (cached or 0),
            cache_n=int(t["cache_n"]) if t else cached or 0,
            tokens_cached=len(prompt),
            prompt_ms=t["prompt_ms"] if t else 0.0,
            predicted_ms=t["predicted_ms"] if t else 0.0,
            round_trip_ms=reply.round_trip_ms,
            json_ms=reply.json_ms,
            server_pick=c.server_pick,
            pick_settings=self.settings.to_dict(),
            top_ids=[x.id for x in c.top],
            top_logprobs=[x.logprob for x in c.top],
            server_timings=t is not None,
            warning=_warning(self, c, prompt, text),
        )
        return step, [(x.id, x.piece) for x in c.top]

    def _to_id(self, text: str) -> tuple[int | None, bool]:
        if self._index is not None:
            return self._index.to_id(text)
        toks = self.vocab.tokenize(text, add_special=False, parse_special=True) if text else []
        return (toks[0], False) if len(toks) == 1 else (None, False)


def _warning(
    b: OpenAIBackend, c: OpenAICompletion, prompt: list[int], text: str | None
) -> str | None:
    """The sentence for what of this reply is not what the panes hold, or None."""
    parts = []
    if text is not None:
        theirs = b.vocab.tokenize(text, add_special=True, parse_special=True)
        if c.prompt_tokens is not None and c.prompt_tokens != len(prompt):
            parts.append(
                f"the server takes text only and counted {c.prompt_tokens} tokens in ours, "
                f"where tokenstep holds {len(prompt)} ids: it saw another prefix than the panes show"
            )
        elif theirs != prompt:
            at = next(
                (i for i, (x, y) in enumerate(zip(theirs, prompt, strict=False)) if x != y), 0
            )
            at = at or min(len(theirs), len(prompt))
            parts.append(
                f"the server takes text only, and our text tokenizes to other ids than the "
                f"{len(prompt)} tokenstep holds (from token {at}): it saw another prefix than "
                "the panes show"
            )
    if c.not_one_to_one:
        shown = ", ".join(repr(s) for s in c.not_one_to_one[:4])
        parts.append(
            f"{len(c.not_one_to_one)} of the server's candidate texts do not name one token id "
            f"({shown}): their ids are the tokenizer's guess or left out"
        )
    if not parts:
        return None
    joined = "; ".join(parts)
    return joined[:1].upper() + joined[1:] + "."


def _file_info(local: LocalVocab, url: str, name: str) -> ModelInfo:
    """The served model's facts from its GGUF's header and vocabulary-only load (no weights:
    size unknown here; llama.cpp's hparams of a vocab-only load must not be read, they abort)."""
    f = facts(gguf_header.read_header(local.path))
    v = local.ptr
    return ModelInfo(
        path=str(local.path),
        arch=one_line(f.arch),
        name=one_line(os.path.basename(name).removesuffix(".gguf") or name),
        desc=one_line(f"{f.name} served by the {WHAT} at {url}"),
        quant=one_line(f.file_type),
        size_bytes=0,
        n_params=0,
        n_vocab=local.n_vocab,
        n_layer=f.n_layer,
        n_head=f.n_head,
        n_head_kv=f.n_head_kv[0] if f.n_head_kv else 0,
        n_embd=f.n_embd,
        head_dim_k=f.head_dim_k,
        head_dim_v=f.head_dim_v,
        n_ff=int(f.n_ff) if isinstance(f.n_ff, int) else 0,
        n_ctx_train=f.n_ctx_train,
        n_swa=0,
        vocab_type="?",
        bos=llama_cpp.llama_vocab_bos(v),
        eos=llama_cpp.llama_vocab_eos(v),
        eot=llama_cpp.llama_vocab_eot(v),
        eog_ids=sorted(local.eog_ids()),
        chat_template=f.chat_template,
        add_bos=bool(llama_cpp.llama_vocab_get_add_bos(v)),
    )
