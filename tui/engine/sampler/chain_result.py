"""What the sampler chain leaves for one logits row: each stage's survivors and what it did,
the final candidates and probabilities, and the pick."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MOVES = ("logit_bias", "penalties", "dry")  # stages that change logits in place


@dataclass
class Stage:
    """One sampler in the chain and the candidates still standing after it."""

    name: str
    param: str
    survivors: np.ndarray  # token ids, in the order llama.cpp left them
    key: str = ""  # llama.cpp's name (top_k, typ_p, ...)
    params: dict[str, Any] = field(default_factory=dict)
    n_before: int = 0
    # (id, logit before, logit after) for the candidates a stage moved (bias, penalties, DRY)
    changed: list[tuple[int, float, float]] = field(default_factory=list)
    why: dict[int, str] = field(default_factory=dict)  # per changed candidate: the reason
    note: str = ""  # what the stage did (XTC fired or not, dynatemp's T, mirostat's mu)
    removed: list[int] = field(default_factory=list)  # XTC: the top candidates it removed

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
    n_forbidden: int = 0  # candidates the grammar sets to -inf (0: no grammar)
    grammar_first: bool = False  # the chain's first pick broke the grammar: resampled
    mu: float | None = None  # mirostat's mu after this pick

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

    @property
    def allowed(self) -> np.ndarray | None:
        """The ids the grammar leaves (None: no grammar)."""
        st = self.stages[0] if self.stages else None
        return st.survivors if st is not None and st.key == "grammar" else None

    def shown_counts(self) -> list[int]:
        """Each stage's survivors that can still be picked. After a grammar a stage's count
        is its survivors the grammar allows: llama.cpp's top-k keeps its k even when the
        grammar left fewer (the rest at -inf, which top-p then drops), and without a resample
        the chain ran on the whole vocabulary and the grammar only checked the pick
        (``common_sampler_sample``). Both come out as what the grammar left, cut further."""
        allowed = self.allowed
        if allowed is None:
            return [st.n for st in self.stages]
        member = np.zeros(self.n_vocab, dtype=bool)
        member[allowed] = True
        return [
            st.n if st.key == "grammar" else int(member[st.survivors].sum()) for st in self.stages
        ]

    def handed_on(self, logits: np.ndarray) -> np.ndarray:
        """The whole row's logits after the stages that move logits in place (logit bias,
        penalties, DRY), in chain order: what the cutting stages after them saw, read off
        llama.cpp's own samplers (each stage's before and after). -inf where the grammar
        forbids a token."""
        out = np.array(logits, dtype=np.float32, copy=True)
        for st in self.stages:
            if st.key in MOVES and st.changed:
                ids = np.fromiter((c[0] for c in st.changed), dtype=np.int64, count=len(st.changed))
                out[ids] = np.fromiter((c[2] for c in st.changed), dtype=np.float32, count=ids.size)
        allowed = self.allowed
        if allowed is not None:
            member = np.zeros(self.n_vocab, dtype=bool)
            member[allowed] = True
            out[~member] = -np.inf
        return out

    def moved(self) -> bool:
        """Whether a stage moved any logit (the pane then shows the logit handed on)."""
        return any(st.key in MOVES and st.changed for st in self.stages)

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
