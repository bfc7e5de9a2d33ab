"""The arithmetic of a comparison, NumPy only: two logits rows in, the figures out.

KL(A‖B) = Σ_v p_A(v) (log p_A(v) − log p_B(v)), in nats, from full-vocabulary log-softmaxes
computed in float64 (a float32 log-softmax over SmolLM2's 49,152 logits loses about 1e-7 per
term, which is the size of the whole KL between two ubatch sizes). Identical rows give 0.0
exactly: every term is p·0.

``llama-perplexity --kl-divergence`` stores the base's log-probabilities as 16-bit integers
over the range [max − 16, max] (a step of 16/65535 ≈ 2.4e-4 nats) and leaves out the ids whose
base log-probability is under −16; this module uses every id and no rounding, so its KL is the
exact one the tool approximates.

A remote B gives only its top-K log-probabilities: :func:`kl_bound` takes the ids both sides
have, puts B's missing mass on the ids B did not list (at most the smallest listed p each), and
so gives a lower bound of the full KL (see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .records import Stats


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of a logits row."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    z = x - m
    return z - np.log(np.exp(z).sum())


def kl(logp_a: np.ndarray, logp_b: np.ndarray) -> float:
    """KL(A‖B) in nats from two float64 log-probability rows."""
    pa = np.exp(logp_a)
    return float(np.dot(pa, logp_a - logp_b))


def top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` highest ids, best first; ties by lower id (as a stable sort of −logit)."""
    k = min(k, logits.shape[0])
    part = np.argpartition(-logits, k - 1)[:k] if k < logits.shape[0] else np.arange(k)
    order = np.lexsort((part, -logits[part].astype(np.float64)))
    return part[order]


def rank_of(logits: np.ndarray, token: int) -> int:
    """0-based rank of ``token``: how many ids have a strictly higher logit."""
    return int(np.count_nonzero(logits > logits[token]))


@dataclass(frozen=True)
class RowDiff:
    """The figures of one position (see :class:`tui.compare.records.Position`)."""

    kl: float
    top1_a: int
    top1_b: int
    rank_in_b: int
    p_a: float
    p_b: float
    max_abs_dlogit: float
    top_a: np.ndarray  # ids, best first
    top_b: np.ndarray
    logp_a: np.ndarray
    logp_b: np.ndarray


def compare_rows(la: np.ndarray, lb: np.ndarray, token: int, k: int = 10) -> RowDiff:
    """Compare side A's and side B's logits rows for the position whose next token is
    ``token``. The top-1 is llama.cpp's argmax (the first id of the highest logit)."""
    lpa, lpb = log_softmax(la), log_softmax(lb)
    return RowDiff(
        kl=kl(lpa, lpb),
        top1_a=int(np.argmax(la)),
        top1_b=int(np.argmax(lb)),
        rank_in_b=rank_of(lb, token),
        p_a=float(np.exp(lpa[token])),
        p_b=float(np.exp(lpb[token])),
        max_abs_dlogit=float(np.max(np.abs(la.astype(np.float64) - lb.astype(np.float64)))),
        top_a=top_k(la, k),
        top_b=top_k(lb, k),
        logp_a=lpa,
        logp_b=lpb,
    )


def kl_bound(logp_a: np.ndarray, listed_b: dict[int, float]) -> float:
    """A lower bound of KL(A‖B) when B gives only ``listed_b`` (id → log p_B) for its top-K.

    By the log-sum inequality, merging the ids B did not list into one bucket can only lower
    the KL: KL ≥ Σ_{v listed} p_A(v) log(p_A(v)/p_B(v)) + P_A(rest) log(P_A(rest)/P_B(rest)),
    with P_B(rest) = 1 − Σ_listed p_B. The result is floored at 0."""
    pa = np.exp(logp_a)
    ids = np.fromiter(listed_b.keys(), dtype=np.int64, count=len(listed_b))
    lb = np.fromiter(listed_b.values(), dtype=np.float64, count=len(listed_b))
    total = float(np.dot(pa[ids], logp_a[ids] - lb))
    rest_a = max(0.0, 1.0 - float(pa[ids].sum()))
    rest_b = max(0.0, 1.0 - float(np.exp(lb).sum()))
    if rest_a > 0.0:
        total += rest_a * (np.log(rest_a) - np.log(rest_b)) if rest_b > 0.0 else float("inf")
    return max(0.0, total)


def stats(positions: list[int], kls: list[float], same: list[bool]) -> Stats:
    """Mean, median, 99th percentile (linear between the two nearest, as llama-perplexity's
    ``percentile``) and max KL; the fraction of same top-1s; the first flip; the positions by
    KL, highest first (ties by position)."""
    n = len(kls)
    if n == 0:
        return Stats(0, 0.0, 0.0, 0.0, 0.0, 1.0, None, 0, ())
    v = np.asarray(kls, dtype=np.float64)
    flips = [p for p, s in zip(positions, same, strict=True) if not s]
    order = sorted(range(n), key=lambda i: (-kls[i], positions[i]))
    return Stats(
        n=n,
        kl_mean=float(v.mean()),
        kl_median=float(np.median(v)),
        kl_p99=float(np.percentile(v, 99.0)),
        kl_max=float(v.max()),
        same_top=(n - len(flips)) / n,
        first_flip=flips[0] if flips else None,
        n_flips=len(flips),
        by_kl=tuple(positions[i] for i in order),
    )
