"""A remote B (``--vs --server URL``): llama-server's top-K log-probabilities, never its logits.

For each compared position, B is asked ``/completion`` with the span's tokens up to that
position as the prompt, ``n_predict`` 1 and ``n_probs`` K (the raw distribution's top K, not
the chain's: ``post_sampling_probs`` off); ``cache_prompt`` on one slot means each request
evaluates one new token. With only K of the vocabulary's probabilities, the KL is
:func:`~tui.compare.divergence.kl_bound`, a lower bound of the full KL, and the summary says
``kl_is_bound``. ``max_abs_dlogit`` is then the largest |Δ log p| over the ids B listed (the
server sends no logits), a listed candidate's ``logit`` is its log p, and a next token B did
not list has ``rank_in_b`` None and ``p_b`` 0 (it is at most the smallest listed p).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import display_bytes
from ..engine.wire.remote_http import ServerClient, ServerError
from ..engine.wire.remote_reply import read_completion
from . import divergence
from .lockstep import LocalSide, Lockstep, Span, candidates
from .records import Candidate, Position, Side

DEFAULT_N_PROBS = 100


class RemoteSide:
    """llama-server at ``url``, asked one position at a time on one slot."""

    def __init__(
        self,
        url: str,
        n_vocab: int,
        *,
        n_probs: int,
        label: str,
        differs: tuple[str, ...],
        timeout: float = 60.0,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: B's server's bearer token; the client's header holds it, nothing else."""
        self.url = url
        self.client = ServerClient(url, timeout, api_key=api_key)
        self.n_vocab = n_vocab
        self.n_probs = n_probs
        self.label = label
        self.differs = differs

    def top(self, prompt: Sequence[int]) -> list[tuple[int, float, bytes]]:
        """(id, log p, piece) of the server's top K after ``prompt``, best first."""
        body = {
            "prompt": list(prompt),
            "n_predict": 1,
            "n_probs": self.n_probs,
            "post_sampling_probs": False,
            "cache_prompt": True,
            "id_slot": 0,
            "temperature": 0.0,
        }
        try:
            reply = self.client.post("/completion", body)
            done = read_completion(self.url, reply.body, self.n_probs, self.n_vocab, len(prompt))
        except ServerError as exc:
            raise TokenstepError(f"B's server: {exc}") from None
        return [(c.id, c.logprob, c.piece) for c in done.top]

    def describe(self, n_ctx: int) -> Side:
        return Side(
            label=self.label,
            differs=self.differs,
            model=self.url,
            n_ctx=n_ctx,
            n_batch=0,
            n_ubatch=0,
            flash_attn="?",
            type_k="?",
            type_v="?",
            kv_bytes=None,
            remote=True,
        )

    def close(self) -> None:
        self.client.close()


def run_remote_span(run: Lockstep, a: LocalSide, remote: RemoteSide, span: Span) -> None:
    """A decodes the span (its rows copied out as in lockstep); B is asked each position."""
    a.clear()
    n = len(span.tokens)
    want = [span.first <= j <= n - 2 for j in range(n)]
    rows = a.decode(span.tokens, 0, want)
    for r, j in enumerate(j for j in range(n) if want[j]):
        listed = remote.top(span.tokens[: j + 1])
        run.positions.append(_position(a, span, j, rows[r], listed, run.top_k))
        if run.on_position is not None:
            run.on_position(run.positions[-1])


def _position(
    a: LocalSide, span: Span, j: int, la: np.ndarray, listed: list[tuple[int, float, bytes]], k: int
) -> Position:
    token = span.tokens[j + 1]
    lpa = divergence.log_softmax(la)
    lb = {t: lp for t, lp, _ in listed}
    ids = [t for t, _, _ in listed]
    rank = ids.index(token) if token in lb else None
    p_a = float(np.exp(lpa[token]))
    p_b = math.exp(lb[token]) if token in lb else 0.0
    top_b = tuple(
        Candidate(t, display_bytes(piece), lp, math.exp(lp)) for t, lp, piece in listed[:k]
    )
    return Position(
        position=span.offset + j,
        token=int(token),
        piece=display_bytes(a.vocab.piece(token)),
        kl=divergence.kl_bound(lpa, lb),
        top1_a=int(np.argmax(la)),
        top1_b=ids[0],
        same_top=int(np.argmax(la)) == ids[0],
        rank_in_b=rank,
        p_a=p_a,
        p_b=p_b,
        dp=p_b - p_a,
        max_abs_dlogit=float(max(abs(lpa[t] - lp) for t, lp in lb.items())),
        top_a=candidates(divergence.top_k(la, k), la, lpa, a.vocab),
        top_b=top_b,
    )
