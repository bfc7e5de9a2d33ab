"""Sample: llama.cpp's own samplers, run one stage at a time so each cut can be seen.

The chain order is llama.cpp's default: top-k, top-p, min-p, temperature, then ``dist`` picks
with a seeded RNG (``greedy`` replaces all of it). The stages are data (:data:`CHAIN`, one
:class:`StageSpec` each), so a new sampler is a new entry, not a change to the loop. Each
stage is a real ``llama_sampler`` applied with ``llama_sampler_apply`` to a
``llama_token_data_array`` that lives in a NumPy buffer, so the survivors and final
probabilities are exactly llama.cpp's.

Re-applying new settings to the *same* logits costs no decode. The preview runs on a clone
of the ``dist`` sampler, so it shows the very token the next step will pick without advancing
the real RNG.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import llama_cpp
import numpy as np

from .errors import TokenstepError

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)

DEFAULT_SEED = 42
_TOP_BLOCK = 256  # block size for top_k_by_logit's lower bound


@dataclass
class SamplerSettings:
    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = DEFAULT_SEED
    greedy: bool = False

    @property
    def is_greedy(self) -> bool:
        """``--temp 0`` means greedy, as in llama.cpp's tools."""
        return self.greedy or self.temp <= 0.0

    def validate(self) -> None:
        if self.temp < 0:
            raise TokenstepError(f"--temp must be 0 or more, not {self.temp}.")
        if self.top_k < 0:
            raise TokenstepError(f"--top-k must be 0 (off) or more, not {self.top_k}.")
        if not 0.0 <= self.top_p <= 1.0:
            raise TokenstepError(f"--top-p must be between 0 and 1, not {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise TokenstepError(f"--min-p must be between 0 and 1, not {self.min_p}.")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise TokenstepError(f"--seed must be between 0 and 4294967295, not {self.seed}.")

    def to_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)

    def copy(self) -> SamplerSettings:
        return replace(self)

    def describe(self) -> str:
        if self.is_greedy:
            return "greedy"
        return (
            f"top-k {self.top_k} · top-p {self.top_p:.2f} · min-p {self.min_p:.2f} · "
            f"temp {self.temp:.2f} · seed {self.seed}"
        )


@dataclass
class Stage:
    """One sampler in the chain and the candidates still standing after it."""

    name: str
    param: str
    survivors: np.ndarray  # token ids, in the order llama.cpp left them

    @property
    def n(self) -> int:
        return int(self.survivors.size)


@dataclass
class ChainResult:
    n_vocab: int
    stages: list[Stage]
    final_ids: np.ndarray
    final_p: np.ndarray
    selected: int  # the token id the pick lands on
    cut_at: dict[int, str] = field(default_factory=dict)

    def p_final(self, token: int) -> float:
        hit = np.nonzero(self.final_ids == token)[0]
        return float(self.final_p[hit[0]]) if hit.size else 0.0

    def p_final_many(self, tokens: list[int]) -> list[float]:
        """:meth:`p_final` for several tokens in one pass over the survivors."""
        if self.final_ids.size <= 64:
            found = dict(zip(self.final_ids.tolist(), self.final_p.tolist(), strict=True))
            return [float(found.get(t, 0.0)) for t in tokens]
        p = np.zeros(self.n_vocab, dtype=np.float64)
        p[self.final_ids] = self.final_p
        return p[np.asarray(tokens, dtype=np.int64)].tolist()  # type: ignore[no-any-return]

    def cut_by_many(self, tokens: list[int]) -> list[str | None]:
        """:meth:`cut_by` for several tokens: one membership mask per stage (a scatter over
        the vocabulary is cheaper than comparing each token with 49k survivors)."""
        ids = np.asarray(tokens, dtype=np.int64)
        out: list[str | None] = [None] * len(tokens)
        alive = np.ones(len(tokens), dtype=bool)
        member = np.zeros(self.n_vocab, dtype=bool)
        before = self.n_vocab
        for st in self.stages:
            if st.survivors.size == before:
                continue  # survivors only shrink: a stage that kept them all cut nothing
            before = st.survivors.size
            member[:] = False
            member[st.survivors] = True
            inside = member[ids]
            for j in np.nonzero(alive & ~inside)[0].tolist():
                out[j] = st.name
            alive &= inside
        return out

    def cut_by(self, token: int) -> str | None:
        """Name of the stage that removed ``token`` (None if it survived)."""
        if token in self.cut_at:
            return self.cut_at[token]
        prev_in = True
        for st in self.stages:
            inside = bool(np.any(st.survivors == token))
            if prev_in and not inside:
                self.cut_at[token] = st.name
                return st.name
            prev_in = inside
        return None


def softmax(logits: np.ndarray) -> np.ndarray:
    """Full-vocabulary probabilities at temperature 1 (float64 for a stable sum)."""
    x = logits.astype(np.float64)
    x -= x.max()
    np.exp(x, out=x)
    x /= x.sum()
    return x


def entropy_bits(p: np.ndarray) -> float:
    nz = p[p > 0]
    return float(-(nz * np.log2(nz)).sum())


def top_k_by_logit(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` highest logits, best first; ties go to the lower id (as a stable sort).

    No full sort and no partition of the whole vocabulary: the k-th largest of the block maxima
    is a lower bound for the k-th largest logit, so only the few logits at or above it are
    sorted. That is ~10x cheaper than ``np.argpartition`` over 49k entries. The blocks are
    strided (block j holds ids j, j + n_blocks, ...): any split into blocks gives the bound, and
    a column maximum is one vectorized pass where a row maximum is n_blocks small reductions."""
    n = logits.size
    k = min(k, n)
    n_blocks = n // _TOP_BLOCK
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    if n_blocks >= k:
        maxima = logits[: n_blocks * _TOP_BLOCK].reshape(_TOP_BLOCK, n_blocks).max(axis=0)
        floor = np.partition(maxima, n_blocks - k)[n_blocks - k]
        cand = np.flatnonzero(logits >= floor)
        if cand.size >= k:  # fewer only with NaN logits
            return cand[np.argsort(-logits[cand], kind="stable")[:k]]
    return np.argsort(-logits, kind="stable")[:k]


def top_stats(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The top-``k`` ids (best first), their probabilities at temperature 1 and the entropy in
    bits of the full distribution, from a single float32 exp pass over the vocabulary.

    With x = logits - max and Z = sum(exp x): p_i = exp(x_i) / Z and, in nats,
    H = -sum p_i log p_i = log Z - sum(p_i x_i), so the entropy needs one dot product instead
    of a second pass of logarithms. Same values as :func:`softmax` and :func:`entropy_bits` to
    about 1e-6."""
    top = top_k_by_logit(logits, k)
    if top.size == 0 or not np.isfinite(logits[top[0]]):
        p = softmax(logits)
        return top, p[top], entropy_bits(p)
    x = logits.astype(np.float32, copy=True)
    x -= x[top[0]]
    e = np.exp(x)
    z = float(e.sum(dtype=np.float64))
    with np.errstate(invalid="ignore"):
        dot = float(np.dot(e, x))
    if not np.isfinite(dot):  # -inf logits: exp gives 0 and 0 * -inf is NaN; skip them
        live = e > 0
        dot = float(np.dot(e[live], x[live]))
    h = (np.log(z) - dot / z) / np.log(2.0)
    return top, (e[top] / z).astype(np.float64), max(float(h), 0.0)


@dataclass(frozen=True)
class StageSpec:
    """One stage of the sampler chain as data: its name, the parameter it shows, and how it
    builds its ``llama_sampler`` from the settings. A new sampler (penalties, DRY, XTC,
    typical, top-n-sigma, mirostat ...) is one more entry in :data:`CHAIN`."""

    name: str
    param: Callable[[SamplerSettings], str]
    build: Callable[[SamplerSettings], llama_cpp.llama_sampler_p]
    active: Callable[[SamplerSettings], bool] = lambda _s: True  # False: skipped, not shown


# The llama.cpp default order: top_k, top_p, min_p, temperature (then dist picks).
CHAIN: tuple[StageSpec, ...] = (
    StageSpec(
        "top-k", lambda s: str(s.top_k), lambda s: llama_cpp.llama_sampler_init_top_k(s.top_k)
    ),
    StageSpec(
        "top-p",
        lambda s: f"{s.top_p:.2f}",
        lambda s: llama_cpp.llama_sampler_init_top_p(s.top_p, 1),
    ),
    StageSpec(
        "min-p",
        lambda s: f"{s.min_p:.2f}",
        lambda s: llama_cpp.llama_sampler_init_min_p(s.min_p, 1),
    ),
    StageSpec(
        "temp", lambda s: f"{s.temp:.2f}", lambda s: llama_cpp.llama_sampler_init_temp(s.temp)
    ),
)


class SamplerChain:
    """Owns the token-data buffer and the seeded ``dist`` sampler for one sequence."""

    def __init__(self, n_vocab: int, seed: int = DEFAULT_SEED) -> None:
        self.n_vocab = n_vocab
        self.buf = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self.arr = llama_cpp.llama_token_data_array()
        self.arr.data = ctypes.cast(self.buf.ctypes.data, llama_cpp.llama_token_data_p)  # type: ignore[assignment]
        self.seed = seed
        self.dist = llama_cpp.llama_sampler_init_dist(seed)
        self.greedy = llama_cpp.llama_sampler_init_greedy()

    def reseed(self, seed: int) -> None:
        """A fresh RNG: the same seed replays the same picks from here."""
        llama_cpp.llama_sampler_free(self.dist)
        self.dist = llama_cpp.llama_sampler_init_dist(seed)
        self.seed = seed

    def _load(self, logits: np.ndarray) -> None:
        self.buf["id"] = self._ids
        self.buf["logit"] = logits
        self.buf["p"] = 0.0
        self.arr.size = self.n_vocab
        self.arr.selected = -1
        self.arr.sorted = False

    def _survivors(self) -> np.ndarray:
        return self.buf["id"][: self.arr.size].copy()

    def run(self, logits: np.ndarray, settings: SamplerSettings, *, commit: bool) -> ChainResult:
        """Apply the chain stage by stage. With ``commit`` the real RNG advances (a pick);
        without it a clone of the RNG is used (a preview that shows the same pick)."""
        if settings.seed != self.seed:
            self.reseed(settings.seed)
        self._load(logits)
        ref = ctypes.byref(self.arr)
        stages: list[Stage] = []
        if settings.is_greedy:
            llama_cpp.llama_sampler_apply(self.greedy, ref)
            sel = int(self.buf["id"][self.arr.selected])
            ids = np.array([sel], dtype=np.int32)
            stages.append(Stage("greedy", "argmax", ids))
            return ChainResult(self.n_vocab, stages, ids, np.ones(1, dtype=np.float32), sel)
        for spec in CHAIN:
            if not spec.active(settings):
                continue
            smpl = spec.build(settings)
            try:
                llama_cpp.llama_sampler_apply(smpl, ref)
            finally:
                llama_cpp.llama_sampler_free(smpl)
            stages.append(Stage(spec.name, spec.param(settings), self._survivors()))
        picker = self.dist if commit else llama_cpp.llama_sampler_clone(self.dist)
        try:
            llama_cpp.llama_sampler_apply(picker, ref)
        finally:
            if not commit:
                llama_cpp.llama_sampler_free(picker)
        n = self.arr.size
        final_ids = self.buf["id"][:n].copy()
        final_p = self.buf["p"][:n].copy()
        sel = int(final_ids[self.arr.selected]) if self.arr.selected >= 0 else int(final_ids[0])
        return ChainResult(self.n_vocab, stages, final_ids, final_p, sel)

    def free(self) -> None:
        for smpl in (self.dist, self.greedy):
            if smpl:
                llama_cpp.llama_sampler_free(smpl)
        self.dist = self.greedy = None
