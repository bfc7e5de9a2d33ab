"""What one llama-server request tells us, and how honest each figure is.

The server returns, for the next position, the log-softmax of the raw logits at T=1 for the top
K tokens (``completion_probabilities[0].top_logprobs``): never the logits themselves. A difference
of two logprobs is a difference of two logits, so the top-K logits are known up to one constant,
which is never shown as if it were the raw logit.

To run tokenstep's own llama.cpp chain on that, the top K go into a full-vocabulary row at their
logprobs and the other N - K tokens share the rest of the mass evenly (each gets at most the K-th
probability, so they never outrank a real candidate). The top-K probabilities then come out exact;
the entropy is an upper bound; and the chain's pick is exact whenever its survivors all lie inside
the top K (:func:`chain_exactness` says when they do not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.errors import TokenstepError
from ..sampler.sampling import SamplerSettings
from .remote_http import Reply, ServerClient, ServerError
from .remote_reply import read_completion, read_slots

# Token texts llama.cpp itself treats as end of generation (llama-vocab.cpp's EOG names).
EOG_NAMES = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "</s>",
)

PICKS = ("tokenstep", "server")
SAMPLERS = ["top_k", "top_p", "min_p", "temperature"]  # tokenstep's chain, in llama.cpp's order
SERVER_PICK_NOTE = (
    "the server's own pick: it builds a new sampler for every request, so its RNG restarts at "
    "each step and its seeded picks never equal one streamed completion"
)


@dataclass
class ServerStep:
    """One ``POST /completion``: what the server evaluated, reused, timed and picked."""

    url: str
    slot: int
    n_probs: int  # K asked for
    n_top: int  # K returned
    n_vocab: int  # N
    mass: float  # probability mass of the top K (of the full softmax at T=1)
    prompt_tokens: int  # the prompt sent (the whole context: token ids)
    prompt_n: int  # tokens the server evaluated for it
    cache_n: int  # tokens it found in its slot's cache
    tokens_cached: int  # the slot's cache after the request
    prompt_ms: float  # the server's own time for evaluating the prompt
    predicted_ms: float  # the server's own time for the token it predicted
    round_trip_ms: float  # measured here: connect, send, wait, read
    json_ms: float  # measured here: encode the request, decode the answer
    server_pick: int | None  # the token the server's own chain sampled
    pick_settings: dict[str, Any]  # the settings the server sampled with
    cache_lost: bool = False  # the server re-evaluated tokens it had cached before
    pick: str = "tokenstep"  # who picked the token sampled from this row: tokenstep or server
    approx: str | None = None  # why tokenstep's pick from the top K may differ (None: exact)
    top_ids: list[int] = field(default_factory=list, repr=False)  # all K, best first
    top_logprobs: list[float] = field(default_factory=list, repr=False)
    server_timings: bool = True  # False: the server reports no timings or cache counts
    warning: str | None = None  # what of this reply is not what the panes hold (one sentence)
    post_chain: list[tuple[int, float]] = field(default_factory=list, repr=False)
    post_note: str | None = None  # the server's own chain beside ours (remote_post)

    @property
    def top_of(self) -> str:
        return f"top {self.n_top} of {self.n_vocab}"

    @property
    def other_ms(self) -> float:
        """The round trip less the server's own evaluation: HTTP, queueing, JSON, sampling."""
        return max(self.round_trip_ms - self.prompt_ms - self.predicted_ms, 0.0)

    def to_dict(self) -> dict[str, Any]:
        out = self._fields()
        if not self.server_timings:
            out["timings_ms"] = {k: out["timings_ms"][k] for k in ("round_trip", "json")}
            out["evaluated"] = out["cached"] = None  # the server does not say
        if self.warning:
            out["warning"] = self.warning
        if self.post_note:
            out["server_chain"] = {
                "survivors": [[t, round(p, 6)] for t, p in self.post_chain],
                "note": self.post_note,
            }
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "slot": self.slot,
            "candidates": self.top_of,
            "top_mass": round(self.mass, 6),
            "logits": "known up to a constant: top entries are logprobs (log-softmax at T=1)",
            "prompt_tokens": self.prompt_tokens,
            "evaluated": self.prompt_n,
            "cached": self.cache_n,
            "tokens_cached": self.tokens_cached,
            "cache_lost": self.cache_lost,
            "timings_ms": {
                "server_prompt": round(self.prompt_ms, 3),
                "server_predicted": round(self.predicted_ms, 3),
                "round_trip": round(self.round_trip_ms, 3),
                "json": round(self.json_ms, 3),
                "other": round(self.other_ms, 3),
            },
            "server_pick": self.server_pick,
            "pick": self.pick,
            "pick_exact": self.approx is None,
            "pick_note": self.approx if self.pick == "tokenstep" else SERVER_PICK_NOTE,
        }


def fill_row(ids: list[int], logprobs: list[float], n_vocab: int) -> tuple[np.ndarray, float]:
    """A full-vocabulary row: the top K at their logprobs, the rest spread evenly over the
    other tokens. Returns the row and the top K's probability mass."""
    lp = np.asarray(logprobs, dtype=np.float64)
    mass = float(np.exp(lp).sum()) if lp.size else 0.0
    rest = 1.0 - mass
    n_rest = n_vocab - len(ids)
    floor = float(lp.min()) if lp.size else 0.0
    if n_rest > 0 and rest > 0:
        fill = min(math.log(rest / n_rest), floor)
        if fill >= floor:  # one float32 step below; below llama.cpp's log(0) (the lowest) is -inf
            with np.errstate(over="ignore"):
                fill = float(np.nextafter(np.float32(fill), np.float32(-np.inf)))
    else:
        fill = -math.inf
    row = np.full(n_vocab, fill, dtype=np.float32)
    if ids:
        row[np.asarray(ids, dtype=np.int64)] = lp.astype(np.float32)
    return row, min(mass, 1.0)


def chain_exactness(settings: SamplerSettings, probs: list[float], n_vocab: int) -> str | None:
    """None when tokenstep's chain on the top K gives what it would give on the full
    vocabulary; otherwise one sentence saying why the pick is an approximation.

    ``probs`` are the top K's probabilities (full softmax at T=1), best first."""
    k_top = len(probs)
    if k_top >= n_vocab or settings.is_greedy:
        return None  # the argmax is always inside the top K
    if 0 < settings.top_k <= k_top:
        return None  # top-k keeps only tokens inside the top K
    mass = float(sum(probs))
    top_k_off = settings.top_k <= 0 or settings.top_k >= n_vocab
    top_p_on = settings.top_p < 1.0
    if top_k_off and top_p_on and mass >= settings.top_p:
        return None  # top-p's cut falls inside the top K, whose probabilities are exact
    min_p_inside = settings.min_p > 0 and probs[-1] < settings.min_p * probs[0]
    if min_p_inside and (top_k_off or not top_p_on):
        return None  # min-p (relative to the best) drops everything past the K-th
    reach = "top-k is off" if top_k_off else f"top-k {settings.top_k} reaches past them"
    cover = (
        f"they hold {mass:.1%} of the mass, less than top-p {settings.top_p:.2f}"
        if top_p_on
        else f"they hold {mass:.1%} of the mass and top-p is off"
    )
    return (
        f"approximation: the chain saw only the top {k_top} of {n_vocab} ({reach}; {cover}; "
        "min-p does not cut inside them), the rest stand in as an even spread"
    )


def server_pick_refusal(s: SamplerSettings) -> str | None:
    """Why ``--pick server`` cannot honour these settings, or None. llama-server builds a new
    grammar for every request and never feeds it the prompt, so over one-token requests its
    grammar would start again at every token: its pick cannot follow one."""
    if s.grammar:
        return (
            "--pick server cannot follow a grammar (--grammar, -j): llama-server starts it "
            "afresh at every one-token request; use --pick tokenstep (the default), which runs "
            "it with the tokens so far."
        )
    return None


def server_chain(s: SamplerSettings, n_ctx: int) -> dict[str, Any]:
    """Every field of tokenstep's chain, for ``--pick server``: the server's own pick then runs
    the same stages in the same order (penalties, DRY, grammar, mirostat and the rest), not
    only top-k, top-p, min-p and temperature. Windows of -1 are sent as the context size
    (llama-server refuses -1 over HTTP); a ban (-inf bias) is ``false``, as JSON has no -inf."""

    refused = server_pick_refusal(s)
    if refused is not None:
        raise TokenstepError(refused)

    def window(n: int) -> int:
        return n_ctx if n == -1 else min(n, n_ctx)

    return {
        "samplers": [name for name in s.samplers if name not in s.off],
        "temperature": 0.0 if s.is_greedy else s.temp,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "typical_p": s.typical_p,
        "top_n_sigma": s.top_n_sigma,
        "repeat_penalty": s.repeat_penalty,
        "repeat_last_n": window(s.repeat_last_n),
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": window(s.dry_penalty_last_n),
        "dry_sequence_breakers": list(s.dry_sequence_breakers),
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "mirostat": s.mirostat,
        "mirostat_tau": s.mirostat_tau,
        "mirostat_eta": s.mirostat_eta,
        "logit_bias": [[t, b if math.isfinite(b) else False] for t, b in s.logit_bias],
        "grammar": s.grammar,
    }


def request_body(
    s: SamplerSettings,
    prompt: list[int],
    reuse: bool,
    n_probs: int,
    slot: int,
) -> dict[str, Any]:
    """One token: ``n_predict`` 1 and the top ``n_probs`` of the next position (log-softmax of
    the raw logits, whatever the chain). With tokenstep's pick the server's own sample is unused
    and runs four cheap samplers; for ``--pick server`` the caller adds the whole chain
    (:func:`server_chain`)."""
    body = {
        "prompt": prompt,
        "n_predict": 1,
        "n_probs": n_probs,
        "cache_prompt": reuse,
        "id_slot": slot,
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
    return body


def read_reply(
    url: str,
    reply: Reply,
    settings: SamplerSettings,
    n_probs: int,
    n_vocab: int,
    n_prompt: int,
) -> tuple[ServerStep, list[tuple[int, bytes]]]:
    """The ServerStep of a ``/completion`` answer, every field checked first
    (:func:`~tui.engine.wire.remote_reply.read_completion`), and each candidate's (id, bytes)."""
    c = read_completion(url, reply.body, n_probs, n_vocab, n_prompt)
    step = ServerStep(
        url=url,
        slot=c.slot,
        n_probs=n_probs,
        n_top=len(c.top),
        n_vocab=n_vocab,
        mass=0.0,
        prompt_tokens=n_prompt,
        prompt_n=c.prompt_n,
        cache_n=c.cache_n,
        tokens_cached=c.tokens_cached,
        prompt_ms=c.prompt_ms,
        predicted_ms=c.predicted_ms,
        round_trip_ms=reply.round_trip_ms,
        json_ms=reply.json_ms,
        server_pick=c.server_pick,
        pick_settings=settings.to_dict(),
        top_ids=[t.id for t in c.top],
        top_logprobs=[t.logprob for t in c.top],
    )
    return step, [(t.id, t.piece) for t in c.top]


def top_probs(step: ServerStep | None) -> list[float]:
    """The exact probabilities of the K candidates a reply sent (best first)."""
    return [] if step is None else [math.exp(lp) for lp in step.top_logprobs]


def slot_busy(client: ServerClient, url: str, slot: int) -> bool:
    """``GET /slots``: is our slot processing someone else's request? (5 s at most.)"""
    try:
        return read_slots(url, client.get("/slots", timeout=5.0).body, slot)
    except ServerError:
        return False


def ask_native(
    b: Any, prompt: list[int], reuse: bool
) -> tuple[ServerStep, list[tuple[int, bytes]]]:
    """One ``POST /completion`` for RemoteBackend ``b``; a timeout on a slot another client
    holds is said as that (``GET /slots``)."""
    try:
        body = request_body(b.settings, prompt, reuse, b.n_probs, b.slot)
        if b.pick == "server":  # the server's own pick runs the whole chain
            body.update(server_chain(b.settings, b.n_ctx))
        reply = b.client.post("/completion", body)
    except ServerError as exc:
        if "did not answer" in str(exc) and slot_busy(b.client, b.url, b.slot):
            raise ServerError(
                f"slot {b.slot} of llama-server at {b.url} is busy with another "
                f"client's request (tokenstep waited {b.client.timeout:g} s).",
                retry=True,
            ) from exc
        raise
    return read_reply(b.url, reply, b.settings, b.n_probs, b.info.n_vocab, len(prompt))
