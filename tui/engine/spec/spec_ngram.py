"""``--spec-type ngram-simple``: a draft from the context itself, no second model.

As llama.cpp's ``common_ngram_simple_draft`` (``common/ngram-map.cpp``) drafts it: the
pattern is the newest ``size_n`` tokens counting the token just sampled (not yet decoded);
the context is searched backwards for the latest earlier occurrence (position 0 is never a
match: llama.cpp uses it for "none"), and the draft is the up to ``size_m`` tokens that
followed it. Nothing is drafted while the context holds ``size_n + size_m + 1`` tokens or fewer, nor
when fewer than ``size_n`` tokens follow the match. So a text that repeats with a period of
``size_n`` tokens or less is never drafted (its latest occurrence is one period back, and
fewer than ``size_n`` tokens follow it): "red, green, blue, yellow" repeated (8 tokens) drafts
nothing at the default 12, while a list of 30 numbers written again drafts 48 at a time. ``--spec-ngram-simple-min-hits`` is parsed
by llama.cpp but this drafter never reads it (ngram-map-k does); the same holds here.
``--spec-draft-n-max`` / ``--spec-draft-n-min`` belong to the draft model: ngram-simple's
draft is capped only by ``size_m`` and by the room left (see :mod:`tui.engine.spec.spec_verify`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SIZE_N, SIZE_M, MIN_HITS = 12, 48, 1  # common.h: common_params_speculative_ngram_map


@dataclass(frozen=True)
class NgramSimple:
    size_n: int = SIZE_N  # --spec-ngram-simple-size-n: the n-gram looked up
    size_m: int = SIZE_M  # --spec-ngram-simple-size-m: the m-gram drafted after it
    min_hits: int = MIN_HITS  # --spec-ngram-simple-min-hits (unused by this drafter)

    name = "ngram-simple"

    def validate(self) -> None:
        for flag, v in (("size-n", self.size_n), ("size-m", self.size_m)):
            if not 1 <= v <= 1024:  # llama.cpp's arg.cpp range
                raise ValueError(f"--spec-ngram-simple-{flag} must be between 1 and 1024, not {v}.")

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        """The draft after ``tokens`` (the context) and ``sampled`` (the pick not yet fed)."""
        at = self.source(tokens, sampled)
        if at is None:
            return []
        return list(tokens[at : at + min(self.size_m, len(tokens) - at)])

    def source(self, tokens: Sequence[int], sampled: int) -> int | None:
        """The context index the draft is copied from (right after the match), or None."""
        n, m = self.size_n, self.size_m
        cur = len(tokens)
        if cur <= n + m + 1:
            return None
        pattern = [*tokens[cur - n + 1 :], sampled]
        match = 0
        for j in range(cur - n - 1, 0, -1):
            if list(tokens[j : j + n]) == pattern:
                match = j
                break
        if match == 0:
            return None
        copy = min(m, cur - (match + n))
        return match + n if copy >= n else None
