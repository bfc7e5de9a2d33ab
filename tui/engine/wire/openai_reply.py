"""Replies of an OpenAI-compatible server, read field by field as ``remote_reply`` reads
llama-server's own.

``GET /v1/models`` lists the models (``data[].id``; llama-server adds ``meta.n_vocab`` and
``meta.n_ctx``, vLLM ``max_model_len``). ``POST /v1/completions`` with ``logprobs: K`` answers
in two forms. llama-server's ``/v1`` (llama-cpp-python 0.3.36's llama.cpp):
``choices[0].logprobs.content[0]`` is the sampled token (``id``, ``token``, ``bytes``,
``logprob``) with ``top_logprobs[]`` by ``id`` and ``bytes``, and ``timings``. OpenAI's legacy
form (OpenAI, vLLM, SGLang, llama-cpp-python's server): ``tokens[0]``, ``token_logprobs[0]``
and ``top_logprobs[0]``, keyed by token *text*, which ``openai_vocab`` maps to ids (vLLM's
``--return-tokens-as-token-ids`` writes ``"token_id:1234"``, which map exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .remote_http import ServerError
from .remote_reply import (
    FLOAT32_LOWEST,
    LOGPROB,
    LOGPROB_SLACK,
    MASS_SLACK,
    MAX_CTX,
    MAX_MS,
    MAX_NAME_CHARS,
    MAX_PIECE_BYTES,
    MAX_VOCAB,
    Fields,
    read_candidates,
)
from .remote_reply import ServerCandidate as ServerCandidate

MAX_MODELS = 4096
WHAT = "OpenAI-compatible server"
COMPLETIONS = "/v1/completions"

# A token text -> (id or None, whether the text names exactly one id).
ToId = Callable[[str], tuple[int | None, bool]]


class OpenAIFields(Fields):
    """:class:`~tui.engine.wire.remote_reply.Fields` naming the server as what it is."""

    def error(self, field: str, value: Any, problem: str) -> ServerError:
        err = super().error(field, value, problem)
        return ServerError(str(err).replace("the llama-server at", f"the {WHAT} at", 1), retry=True)

    def missing(self, field: str) -> ServerError:
        return ServerError(
            f"the {WHAT} at {self.url} sent {self.path} without {field}.", retry=True
        )


@dataclass(frozen=True)
class ServedModel:
    id: str
    n_vocab: int | None  # llama-server's meta.n_vocab
    n_ctx: int | None  # llama-server's meta.n_ctx, vLLM's max_model_len


def read_model_list(url: str, body: Any) -> list[ServedModel]:
    """``GET /v1/models``: every served model's id (at least one)."""
    f = OpenAIFields(url, "/v1/models")
    data = f.obj(body, "the reply").get("data")
    if not data:
        raise ServerError(f"the {WHAT} at {url} lists no model in /v1/models.")
    out = []
    for i, entry in enumerate(f.items(data, "data", MAX_MODELS)):
        e = f.obj(entry, f"data[{i}]")
        if e.get("id") is None:
            raise f.missing(f"data[{i}].id")
        name = f.text(e["id"], f"data[{i}].id", MAX_NAME_CHARS)
        raw_meta = e.get("meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        n_vocab = meta.get("n_vocab")
        n_ctx = meta.get("n_ctx", e.get("max_model_len"))
        out.append(
            ServedModel(
                name,
                None
                if n_vocab is None
                else f.whole(n_vocab, f"data[{i}].meta.n_vocab", 1, MAX_VOCAB),
                None if n_ctx is None else f.whole(n_ctx, f"data[{i}] context size", 1, MAX_CTX),
            )
        )
    return out


def choose_model(url: str, models: list[ServedModel], name: str | None) -> ServedModel:
    """The model to step: ``name`` when given (one the server serves), else the only one."""
    names = ", ".join(m.id for m in models[:20]) + (" …" if len(models) > 20 else "")
    if name is None:
        if len(models) == 1:
            return models[0]
        raise ServerError(
            f"the {WHAT} at {url} serves {len(models)} models ({names}): pick one with "
            "--server-model NAME."
        )
    for m in models:
        if m.id == name:
            return m
    raise ServerError(f"the {WHAT} at {url} does not serve {name!r}; it serves {names}.")


@dataclass(frozen=True)
class OpenAICompletion:
    """The checked fields of one ``/v1/completions`` reply (``max_tokens`` 1)."""

    form: str  # "content" (llama-server's /v1) or "legacy" (OpenAI's)
    top: list[ServerCandidate]  # best first, ids inside the vocabulary
    not_one_to_one: list[str]  # legacy texts that name no id, or several
    server_pick: int | None
    timings: dict[str, float] | None  # llama-server's own; None: the server reports none
    prompt_tokens: int | None  # usage.prompt_tokens: the server's count of our prompt
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens


def read_openai_completion(
    url: str, body: Any, n_probs: int, n_vocab: int, to_id: ToId, prompt_len: int = MAX_CTX
) -> OpenAICompletion:
    """``prompt_len``: the most prompt tokens the server can have counted (``timings.prompt_n``
    and ``cache_n`` are whole numbers up to it, as over the native API)."""
    f = OpenAIFields(url, COMPLETIONS)
    body = f.obj(body, "the reply")
    choices = f.items(body.get("choices"), "choices", 16)
    if not choices:
        raise f.missing("choices[0]")
    choice = f.obj(choices[0], "choices[0]")
    logprobs = choice.get("logprobs")
    if not logprobs:
        raise ServerError(
            f"the {WHAT} at {url} answered {COMPLETIONS} without logprobs (asked for "
            f"{n_probs}): it does not return them, or not for this model.",
            retry=True,
        )
    lp = f.obj(logprobs, "choices[0].logprobs")
    odd: list[str] = []
    if lp.get("content"):
        form = "content"
        top, pick = _content(f, lp, n_probs, n_vocab)
    else:
        form = "legacy"
        top, odd, pick = _legacy(f, lp, n_probs, n_vocab, to_id)
    mass = math.fsum(math.exp(c.logprob) for c in top)
    if mass > 1.0 + MASS_SLACK:
        raise f.error(
            "choices[0].logprobs", "…", f"probabilities that sum to {mass:.4f}, more than 1"
        )
    top.sort(key=lambda c: -c.logprob)
    t = body.get("timings")
    timings = None
    if isinstance(t, dict):
        timings = {
            key: 0.0 if t.get(key) is None else float(f.whole(t[key], f"timings.{key}", 0, prompt_len))
            for key in ("prompt_n", "cache_n")
        } | {
            key: 0.0 if t.get(key) is None else f.number(t[key], f"timings.{key}", 0.0, MAX_MS)
            for key in ("prompt_ms", "predicted_ms")
        }
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    n_prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return OpenAICompletion(
        form=form,
        top=top,
        not_one_to_one=odd,
        server_pick=pick,
        timings=timings,
        prompt_tokens=None
        if n_prompt is None
        else f.whole(n_prompt, "usage.prompt_tokens", 0, MAX_CTX),
        cached_tokens=None
        if cached is None
        else f.whole(cached, "usage…cached_tokens", 0, MAX_CTX),
    )


def _logprob(f: Fields, value: Any, field: str) -> float:
    lp = f.number(value, field, -math.inf, LOGPROB_SLACK, LOGPROB)
    return min(max(lp, FLOAT32_LOWEST), 0.0)


def _content(
    f: Fields, lp: dict[str, Any], n_probs: int, n_vocab: int
) -> tuple[list[ServerCandidate], int | None]:
    """llama-server's /v1 form: ids and bytes."""
    first = f.obj(f.items(lp["content"], "logprobs.content", MAX_CTX)[0], "logprobs.content[0]")
    where = "logprobs.content[0].top_logprobs"
    top = read_candidates(f, first.get("top_logprobs"), where, min(n_vocab, n_probs + 1), n_vocab)
    pick = first.get("id")
    return top, None if pick is None else f.token(pick, "logprobs.content[0].id", n_vocab)


def _legacy(
    f: Fields, lp: dict[str, Any], n_probs: int, n_vocab: int, to_id: ToId
) -> tuple[list[ServerCandidate], list[str], int | None]:
    """OpenAI's form: token texts. Each text becomes an id through ``to_id``; a text that
    names no id is left out (its mass joins the even spread), one that names several is put on
    the id the tokenizer gives it; both are listed in ``not_one_to_one``."""
    where = "logprobs.top_logprobs"
    rows = f.items(lp.get("top_logprobs"), where, MAX_CTX)
    if not rows or rows[0] is None:
        raise f.missing(f"{where}[0]")
    # llama-cpp-python adds the sampled token to the K: at most K + 1 entries.
    row = f.obj(rows[0], f"{where}[0]")
    if len(row) > n_probs + 1:
        raise f.error(where, f"{len(row)} entries", f"more than the {n_probs} asked for")
    top: list[ServerCandidate] = []
    odd: list[str] = []
    seen: set[int] = set()
    for text, value in row.items():
        piece_text = f.text(text, f"a {where}[0] key", MAX_PIECE_BYTES)
        logprob = _logprob(f, value, f"{where}[0][{piece_text!r}]")
        tok, exact = to_id(piece_text)
        if tok is None or tok in seen:
            odd.append(piece_text)
            continue
        if not exact:
            odd.append(piece_text)
        seen.add(tok)
        top.append(ServerCandidate(tok, logprob, piece_text.encode("utf-8", "surrogatepass")))
    if not top:
        raise f.error(where, list(row)[:5], "no text that names a token id")
    tokens = lp.get("tokens")
    pick = None
    if tokens is not None:  # the sampled token's text: said when malformed, not dropped
        listed = f.items(tokens, "logprobs.tokens", MAX_CTX)
        if listed:
            pick = to_id(f.text(listed[0], "logprobs.tokens[0]", MAX_PIECE_BYTES))[0]
    return top, odd, pick
