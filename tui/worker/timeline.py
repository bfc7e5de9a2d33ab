"""The timeline of ``llama_decode`` calls: the newest ones for the pane, totals over all."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ..engine.step import StepRecord

TIMELINE_KEEP = 2048  # calls the timeline pane can draw; older ones are only counted


@dataclass(frozen=True)
class TimelineTotals:
    """Sums over every ``llama_decode`` call of the chat, drawn or not."""

    prefill_calls: int = 0
    prefill_tokens: int = 0
    prefill_ms: float = 0.0
    decode_calls: int = 0
    decode_tokens: int = 0
    decode_ms: float = 0.0


class Timeline:
    """(phase, n_tokens, decode_ms) per ``llama_decode`` call: the newest ``TIMELINE_KEEP``
    for the pane to draw, and running totals over all of them, so a long session costs O(1)
    per step."""

    def __init__(self, records: Iterable[StepRecord] = ()) -> None:
        self.recent: deque[tuple[str, int, float]] = deque(maxlen=TIMELINE_KEEP)
        self.n = 0
        self._totals = {"prefill": [0, 0, 0.0], "decode": [0, 0, 0.0]}  # calls, tokens, ms
        self.add(records)

    def add(self, records: Iterable[StepRecord]) -> None:
        for rec in records:
            n, ms = rec.call.n_tokens, rec.decode_ms
            self.recent.append((rec.phase, n, ms))
            self.n += 1
            acc = self._totals["prefill" if rec.phase == "prefill" else "decode"]
            acc[0] += 1
            acc[1] += n
            acc[2] += ms

    def __len__(self) -> int:
        return self.n

    @property
    def older(self) -> int:
        """Calls before ``recent[0]`` that are only counted."""
        return self.n - len(self.recent)

    def totals(self) -> TimelineTotals:
        p, d = self._totals["prefill"], self._totals["decode"]
        return TimelineTotals(int(p[0]), int(p[1]), p[2], int(d[0]), int(d[1]), d[2])
