"""Every llama-server reply, read as a session file is read: types first, then ranges.

A reply comes from outside, so before anything is built from it (a row of ``n_vocab`` floats,
a piece, a context) each field used is checked once: its type, then its range (an id inside
the vocabulary, a logprob that is a log-probability). A bad field is one
:class:`~tui.engine.wire.remote_http.ServerError` naming it ("... sent /props with
default_generation_settings.n_ctx 'abc', not a whole number."), raised before the caller
changes any state. The transport caps a reply's bytes (``MAX_REPLY_BYTES``) and a request's
time; fields are capped far above a real server's (:data:`MAX_VOCAB`, :data:`MAX_PIECE_BYTES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..model.checks import shown
from .remote_http import ServerError

MAX_VOCAB = 1 << 22  # 4,194,304 ids; the largest real vocabularies are ~262k (a row is 4 B each)
MAX_CTX = 1 << 24  # positions in one slot
MAX_SLOTS = 4096
MAX_PIECE_BYTES = 4096  # one token's text; real pieces are at most a few hundred bytes
MAX_NAME_CHARS = 4096  # a model path, alias or type
MAX_TEMPLATE_CHARS = 1 << 20  # chat.py refuses templates past 128k with its own sentence
MAX_BIG = 1 << 62  # sizes and parameter counts (bytes of a model file)
MAX_MS = 1e9  # a server's own timing, in ms (11 days)
LOGPROB_SLACK = 1e-3  # float32 rounding: log p of the top token may print as 1e-7
MASS_SLACK = 1e-3  # the top K's probabilities may sum past 1 by rounding only
FLOAT32_LOWEST = -3.4028234663852886e38  # a row is float32: anything lower would be -inf
LOGPROB = "not a log-probability (a finite number, at most 0)"


class Fields:
    """The checks for one reply: each failure is a sentence naming the endpoint and field."""

    def __init__(self, url: str, path: str) -> None:
        self.url, self.path = url, path

    def error(self, field: str, value: Any, problem: str) -> ServerError:
        return ServerError(
            f"the llama-server at {self.url} sent {self.path} with {field} {shown(value)}, "
            f"{problem}.",
            retry=True,
        )

    def missing(self, field: str) -> ServerError:
        return ServerError(
            f"the llama-server at {self.url} sent {self.path} without {field}: it does not "
            "look like llama-server.",
            retry=True,
        )

    def obj(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(field, value, "not an object")
        return value

    def items(self, value: Any, field: str, most: int) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(field, value, "not a list")
        if len(value) > most:
            raise self.error(field, value, f"{len(value):,} long, more than the {most:,} it can be")
        return value

    def whole(self, value: Any, field: str, lo: int = 0, hi: int = MAX_BIG) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, value, "not a whole number")
        if not lo <= value <= hi:
            raise self.error(field, value, f"outside {lo:,}..{hi:,}")
        return value

    def number(
        self, value: Any, field: str, lo: float, hi: float, what: str | None = None
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(field, value, what or "not a number")
        if not math.isfinite(value) or not lo <= value <= hi:
            raise self.error(field, value, what or f"outside {lo:g}..{hi:g}")
        return float(value)

    def text(self, value: Any, field: str, most: int) -> str:
        if not isinstance(value, str):
            raise self.error(field, value, "not a string")
        if len(value) > most:
            raise self.error(field, value, f"longer than the {most:,} characters tokenstep takes")
        # JSON may carry a lone surrogate ("\ud800"), which no terminal or request can encode.
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")

    def token(self, value: Any, field: str, n_vocab: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, value, "not a token id (a whole number)")
        if not 0 <= value < n_vocab:
            raise self.error(field, value, f"outside the vocabulary (0..{n_vocab - 1:,})")
        return value

    def piece(self, value: Any, field: str) -> bytes:
        """A token's text: a string, or (llama-server's form for a piece that is not valid
        UTF-8 on its own) a list of byte values."""
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
        elif isinstance(value, list) and all(type(b) is int and 0 <= b < 256 for b in value):
            data = bytes(value)
        else:
            raise self.error(field, value, "neither text nor a list of byte values 0..255")
        if len(data) > MAX_PIECE_BYTES:
            raise self.error(field, value, f"longer than the {MAX_PIECE_BYTES:,} bytes of a token")
        return data


def read_health(url: str, body: Any) -> None:
    if not isinstance(body, dict) or body.get("status") != "ok":
        raise ServerError(f"{url} answered /health without status ok: is it llama-server?")


def read_props(url: str, body: Any, slot: int) -> dict[str, Any]:
    """``GET /props``: the slot's context size, the slot count and the model's names. Returns
    only the checked fields, in the reply's own shape (``default_generation_settings.n_ctx``)."""
    f = Fields(url, "/props")
    if not isinstance(body, dict) or "default_generation_settings" not in body:
        raise f.missing("default_generation_settings")
    dgs = f.obj(body["default_generation_settings"], "default_generation_settings")
    if dgs.get("n_ctx") is None:
        raise f.missing("default_generation_settings.n_ctx")
    n_ctx = f.whole(dgs["n_ctx"], "default_generation_settings.n_ctx", 1, MAX_CTX)
    total = body.get("total_slots")
    total = 0 if total is None else f.whole(total, "total_slots", 1, MAX_SLOTS)
    if total and not 0 <= slot < total:
        raise ServerError(
            f"--slot {slot}: llama-server at {url} has {total} slot(s), 0 to {total - 1} "
            "(start it with a larger -np for more)."
        )
    out: dict[str, Any] = {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": total}
    for key in ("model_path", "model_alias", "model_ftype"):
        value = body.get(key)
        out[key] = "" if value is None else f.text(value, key, MAX_NAME_CHARS)
    for key in ("eos_token", "bos_token"):
        value = body.get(key)
        out[key] = "" if value is None else f.text(value, key, MAX_PIECE_BYTES)
    tmpl = body.get("chat_template")
    out["chat_template"] = (
        None if tmpl is None else f.text(tmpl, "chat_template", MAX_TEMPLATE_CHARS)
    )
    return out


def read_models(url: str, body: Any) -> dict[str, Any]:
    """``GET /v1/models``: the model's facts from ``data[0].meta``; n_vocab is required (every
    row tokenstep builds has n_vocab entries)."""
    f = Fields(url, "/v1/models")
    data = f.obj(body, "the reply").get("data")
    if not isinstance(data, list) or not data:
        raise f.missing("data[0].meta.n_vocab")
    meta = f.obj(f.obj(data[0], "data[0]").get("meta"), "data[0].meta")
    if meta.get("n_vocab") is None:
        raise f.missing("data[0].meta.n_vocab")
    out: dict[str, Any] = {
        "n_vocab": f.whole(meta["n_vocab"], "data[0].meta.n_vocab", 1, MAX_VOCAB)
    }
    for key, hi in (("n_ctx", MAX_CTX), ("n_ctx_train", MAX_BIG), ("n_embd", MAX_BIG)):
        if meta.get(key) is not None:
            out[key] = f.whole(meta[key], f"data[0].meta.{key}", 0, hi)
    for key in ("size", "n_params"):
        if meta.get(key) is not None:
            out[key] = f.whole(meta[key], f"data[0].meta.{key}", 0, MAX_BIG)
    if meta.get("ftype") is not None:
        out["ftype"] = f.text(meta["ftype"], "data[0].meta.ftype", MAX_NAME_CHARS)
    return out


def read_tokens(
    url: str, body: Any, n_vocab: int, n_bytes: int = MAX_CTX
) -> list[tuple[int, bytes | None]]:
    """``POST /tokenize`` (``with_pieces``): each token's id, inside the vocabulary, and its
    piece (None when the server sent a bare id). A text of ``n_bytes`` bytes has at most one
    token per byte, plus the few a tokenizer adds (BOS, EOS, a leading space)."""
    f = Fields(url, "/tokenize")
    tokens = f.items(f.obj(body, "the reply").get("tokens"), "tokens", n_bytes + 8)
    out: list[tuple[int, bytes | None]] = []
    for i, item in enumerate(tokens):
        if isinstance(item, dict):
            if "id" not in item:
                raise f.missing(f"tokens[{i}].id")
            tok = f.token(item["id"], f"tokens[{i}].id", n_vocab)
            piece = item.get("piece")
            out.append((tok, None if piece is None else f.piece(piece, f"tokens[{i}].piece")))
        else:
            out.append((f.token(item, f"tokens[{i}]", n_vocab), None))
    return out


def read_detokenized(url: str, body: Any) -> bytes:
    """``POST /detokenize`` of one token: its text."""
    f = Fields(url, "/detokenize")
    content = f.obj(body, "the reply").get("content")
    if content is None:
        raise f.missing("content")
    return f.piece(content, "content")


def read_slots(url: str, body: Any, slot: int) -> bool:
    """``GET /slots``: whether ``slot`` is processing a request (False when it is not listed)."""
    f = Fields(url, "/slots")
    for i, entry in enumerate(f.items(body, "the reply", MAX_SLOTS)):
        s = f.obj(entry, f"[{i}]")
        if s.get("id") == slot:
            busy = s.get("is_processing")
            if not isinstance(busy, bool):
                raise f.error(f"[{i}].is_processing", busy, "not true or false")
            return busy
    return False


@dataclass(frozen=True)
class ServerCandidate:
    """One of the top K of a /completion reply: its id, logprob (at T=1) and bytes."""

    id: int
    logprob: float
    piece: bytes


@dataclass(frozen=True)
class Completion:
    """The checked fields of one ``POST /completion`` reply (``n_predict`` 1)."""

    top: list[ServerCandidate]  # best first
    slot: int  # -1: not said
    prompt_n: int
    cache_n: int
    tokens_cached: int
    prompt_ms: float
    predicted_ms: float
    server_pick: int | None


def read_candidates(
    f: Fields, entries: Any, where: str, most: int, n_vocab: int
) -> list[ServerCandidate]:
    """llama-server's list of candidates (``/completion`` and its ``/v1`` alike): at most
    ``most`` entries, each an ``id`` inside the vocabulary, listed once, with a ``logprob``
    (finite, at most 0) and its ``bytes`` (or ``token`` text)."""
    if not entries:
        raise f.missing(where)
    top: list[ServerCandidate] = []
    seen: set[int] = set()
    for i, c in enumerate(f.items(entries, where, most)):
        c = f.obj(c, f"{where}[{i}]")
        for key in ("id", "logprob"):
            if key not in c:
                raise f.missing(f"{where}[{i}].{key}")
        tok = f.token(c["id"], f"{where}[{i}].id", n_vocab)
        if tok in seen:
            raise f.error(f"{where}[{i}].id", tok, "listed twice")
        seen.add(tok)
        lp = f.number(c["logprob"], f"{where}[{i}].logprob", -math.inf, LOGPROB_SLACK, LOGPROB)
        raw = c.get("bytes") if c.get("bytes") is not None else c.get("token", "")
        lp = min(max(lp, FLOAT32_LOWEST), 0.0)  # llama-server writes log(0) as this lowest
        top.append(ServerCandidate(tok, lp, f.piece(raw, f"{where}[{i}].bytes")))
    return top


def read_completion(url: str, body: Any, n_probs: int, n_vocab: int, n_prompt: int) -> Completion:
    """The top K of the next position, each id inside the vocabulary and each logprob a
    log-probability (finite, at most 0, together at most a mass of 1), and the timings."""
    f = Fields(url, "/completion")
    body = f.obj(body, "the reply")
    probs = body.get("completion_probabilities")
    if not probs:
        raise f.missing(f"completion_probabilities (for n_probs {n_probs})")
    first = f.obj(
        f.items(probs, "completion_probabilities", MAX_CTX)[0], "completion_probabilities[0]"
    )
    where = "completion_probabilities[0].top_logprobs"
    entries = first.get("top_logprobs")
    top = read_candidates(f, entries, where, min(n_vocab, max(n_probs, 1)), n_vocab)
    mass = math.fsum(math.exp(c.logprob) for c in top)
    if mass > 1.0 + MASS_SLACK:
        raise f.error(where, entries, f"probabilities that sum to {mass:.4f}, more than 1")
    top.sort(key=lambda c: -c.logprob)  # llama-server sends them best first; ties stay in order
    t = body.get("timings")
    t = {} if t is None else f.obj(t, "timings")
    counts = {
        key: 0 if t.get(key) is None else f.whole(t[key], f"timings.{key}", 0, n_prompt)
        for key in ("prompt_n", "cache_n")
    }
    ms = {
        key: 0.0 if t.get(key) is None else f.number(t[key], f"timings.{key}", 0.0, MAX_MS)
        for key in ("prompt_ms", "predicted_ms")
    }
    slot = body.get("id_slot")
    cached = body.get("tokens_cached")
    picks = body.get("tokens")
    pick = None
    if picks:
        pick = f.token(f.items(picks, "tokens", MAX_CTX)[0], "tokens[0]", n_vocab)
    return Completion(
        top=top,
        slot=-1 if slot is None else f.whole(slot, "id_slot", -1, MAX_SLOTS),
        prompt_n=counts["prompt_n"],
        cache_n=counts["cache_n"],
        tokens_cached=0 if cached is None else f.whole(cached, "tokens_cached", 0, MAX_CTX),
        prompt_ms=ms["prompt_ms"],
        predicted_ms=ms["predicted_ms"],
        server_pick=pick,
    )
