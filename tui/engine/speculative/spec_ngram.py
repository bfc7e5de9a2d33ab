"""``--spec-type ngram-simple``: a draft from the context itself, no second model.

As llama.cpp's ``common_ngram_simple_draft`` (``common/ngram-map.cpp``): the pattern is the
newest ``size_n`` tokens (the one just sampled included), searched backwards for its latest
earlier occurrence (position 0 never matches: llama.cpp's "none"); the draft is the up to
``size_m`` tokens that followed. Nothing is drafted while the context holds ``size_n + size_m +
1`` tokens or fewer, nor when fewer than ``size_n`` follow the match, so a text repeating with
a period of ``size_n`` or less never drafts: "red, green, blue, yellow" repeated (8 tokens)
drafts nothing at the default 12, while 30 numbers written again draft 48 at a time.
``--spec-ngram-simple-min-hits`` is parsed and unused, as in llama.cpp; ``--spec-draft-n-max``/
``-n-min`` belong to the draft model (see :mod:`tui.engine.speculative.spec_verify`).
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
