"""What ``tokenstep compare`` found, as plain frozen records (no Textual, no Rich).

A run compares two configurations, A and B, on the same tokens. Each compared position is one
:class:`Position`: the distribution each side gave for the token after ``position`` (the
logits row of the batch token at ``position``), the token A was fed next (``token``), the
KL divergence KL(A‖B) in nats, both top-1s, where A's next token ranks in B and how its
probability moved. :class:`Summary` holds the run's figures (the ones ``llama-perplexity
--kl-divergence`` prints) and a :class:`Side` for each configuration. :class:`Result` is what
the command line prints and the compare screen draws.

Field names are stable: the screen and scripts read them. New fields are added, never renamed.
Every record has ``to_json()``: one serializer (:func:`to_json`) for all of them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def to_json(obj: Any) -> Any:
    """Plain JSON values for a record (or a tuple, list, dict or number of them): dataclasses
    become dicts in field order, tuples lists, a non-finite float ``None``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One entry of a side's top-K at a position: llama.cpp's logit and its softmax p over
    the full vocabulary (over the K entries a server returned, for a remote side)."""

    id: int
    piece: str
    logit: float
    p: float

    def to_json(self) -> Any:
        return to_json(self)


@dataclasses.dataclass(frozen=True)
class Side:
    """One configuration. ``label`` is what the screen prints ("A: f16 KV", "B: q4_0 KV");
    ``differs`` names B's changes against A as flags (``["-ctk q4_0", "-ctv q4_0"]``), empty
    for A. ``kv_bytes`` is llama.cpp's own KV buffer size for the context (K plus V, every
    layer), ``None`` for a remote side, whose cache is not visible."""

    label: str
    differs: tuple[str, ...]
    model: str
    n_ctx: int
    n_batch: int
    n_ubatch: int
    flash_attn: str
    type_k: str
    type_v: str
    kv_bytes: int | None
    remote: bool = False
    sampler: str = ""

    def to_json(self) -> Any:
        return to_json(self)


@dataclasses.dataclass(frozen=True)
class Position:
    """One compared position. ``position`` is the batch position whose logits row predicts
    ``token`` (the token A was fed next, or A's pick in free-running mode). ``kl`` is
    KL(A‖B) = Σ p_A (log p_A − log p_B) in nats, float64 over the full vocabulary (a bound
    from the top-K for a remote B). ``rank_in_b`` is 0 when ``token`` is B's top-1 (``None``
    when a remote B's top-K does not hold it); ``dp`` is p_B(token) − p_A(token).
    ``max_abs_dlogit`` is max |logit_A − logit_B| over the vocabulary (over the ids both top-Ks
    hold, for a remote B). ``top_a``/``top_b`` are each side's top-K, best first. In
    free-running mode ``token_b`` is B's own pick there and ``piece_b`` its piece (both
    ``None`` when teacher-forced): B's pick need not be in either top-K."""

    position: int
    token: int
    piece: str
    kl: float
    top1_a: int
    top1_b: int
    same_top: bool
    rank_in_b: int | None
    p_a: float
    p_b: float
    dp: float
    max_abs_dlogit: float
    top_a: tuple[Candidate, ...]
    top_b: tuple[Candidate, ...]
    token_b: int | None = None
    piece_b: str | None = None

    def to_json(self) -> Any:
        return to_json(self)


@dataclasses.dataclass(frozen=True)
class Stats:
    """The figures over the compared positions (:func:`~tui.compare.divergence.stats`). ``n``
    positions compared; KL figures in nats; ``same_top`` is the fraction (of 1) of positions
    whose top-1s agree; ``first_flip`` the first position where they do not (``None`` if
    none) and ``n_flips`` how many; ``by_kl`` the positions, highest KL first."""

    n: int
    kl_mean: float
    kl_median: float
    kl_p99: float
    kl_max: float
    same_top: float
    first_flip: int | None
    n_flips: int
    by_kl: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Summary(Stats):
    """The run's figures: its :class:`Stats`, the two sides, and how they ran. ``kl_is_bound``
    says the KL comes from a remote side's top-K (a bound, not the full-vocabulary value).
    ``shared_logits`` says B differs from A only in its sampler, so both sides share A's logits
    (every KL is 0 by construction) and only the chains differ. ``mode`` is ``"teacher"`` or
    ``"free"``; in free mode ``parted_at`` is the first position whose picks differ (``None``
    if the texts never part) and ``text_a``/``text_b`` are the two generated texts."""

    a: Side
    b: Side
    kl_is_bound: bool = False
    shared_logits: bool = False
    mode: str = "teacher"
    parted_at: int | None = None
    text_a: str = ""
    text_b: str = ""

    @property
    def kv_saving(self) -> float | None:
        """B's KV memory saving against A's as a fraction of A's (negative: B takes more)."""
        a, b = self.a.kv_bytes, self.b.kv_bytes
        if not a or b is None:
            return None
        return 1.0 - b / a

    def to_json(self) -> Any:
        return to_json(self)


@dataclasses.dataclass(frozen=True)
class Result:
    """A whole comparison: the tokens both sides were fed (A's, ``tokens``), every compared
    position in order, and the summary."""

    tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    positions: tuple[Position, ...]
    summary: Summary

    def to_json(self) -> Any:
        return to_json(self)
