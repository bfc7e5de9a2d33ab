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
    decode_tokens: int = 0  # tokens emitted: a verify round's picks, not its batch's rows
    decode_ms: float = 0.0
    verify_calls: int = 0  # --spec-type: verify decodes among the decode calls
    draft_calls: int = 0  # draft-simple: the draft model's own llama_decode calls
    draft_ms: float = 0.0


class Timeline:
    """(phase, n_tokens, decode_ms) per ``llama_decode`` call: the newest ``TIMELINE_KEEP``
    for the pane to draw, and running totals over all of them, so a long session costs O(1)
    per step."""

    def __init__(self, records: Iterable[StepRecord] = ()) -> None:
        self.recent: deque[tuple[str, int, float]] = deque(maxlen=TIMELINE_KEEP)
        self.n = 0
        self._totals = {"prefill": [0, 0, 0.0], "decode": [0, 0, 0.0]}  # calls, tokens, ms
        self._spec = [0, 0, 0.0]  # verify calls, draft-model calls, draft-model ms
        self.add(records)

    def add(self, records: Iterable[StepRecord]) -> None:
        for rec in records:
            n, ms = rec.call.n_tokens, rec.decode_ms
            self.recent.append((rec.phase, n, ms))
            self.n += 1
            acc = self._totals["prefill" if rec.phase == "prefill" else "decode"]
            acc[0] += 1
            acc[2] += ms
            sp = rec.spec
            if sp is not None and sp.picks and rec.phase == "verify":
                acc[1] += len(sp.picks)  # the round emitted its picks; the rest was cut
                self._spec[0] += 1
            else:
                acc[1] += n
            if sp is not None and sp.draft_decodes:
                self._spec[1] += sp.draft_decodes
                self._spec[2] += sp.draft_ms

    def __len__(self) -> int:
        return self.n

    @property
    def older(self) -> int:
        """Calls before ``recent[0]`` that are only counted."""
        return self.n - len(self.recent)

    def totals(self) -> TimelineTotals:
        p, d = self._totals["prefill"], self._totals["decode"]
        v, dc, dms = self._spec
        return TimelineTotals(
            int(p[0]), int(p[1]), p[2], int(d[0]), int(d[1]), d[2], int(v), int(dc), float(dms)
        )
