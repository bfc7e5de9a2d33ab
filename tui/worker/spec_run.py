"""What the worker keeps of speculative decoding (``--spec-type``) between rounds: the
speculator, the pick not decoded yet, and the marks the text pane draws. A leaf module: the
parts protocol, the views and the round itself (:mod:`tui.worker.spec_step`) all read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.run.step import StepRecord
from ..engine.speculative.spec_verify import Speculator


@dataclass(frozen=True)
class SpecMarks:
    """What the text pane marks for the last round: the accepted drafted tokens (context
    indices [start, end)), the first rejected draft token (struck through) and the pick that
    replaced it or came after the accepted draft (not decoded yet)."""

    start: int = 0
    end: int = 0
    rejected: bytes | None = None
    pending: bytes | None = None
    summary: str | None = None  # the header figure


@dataclass
class SpecRun:
    """The speculator, the pick not yet decoded, and this run's plain decodes for the
    comparison."""

    spec: Speculator
    pending: int | None = None
    marks: SpecMarks = field(default_factory=SpecMarks)
    plain_ms: list[float] = field(default_factory=list)  # one-token decodes outside rounds
    record: StepRecord | None = None  # the last round's decode (its rows for the logits pane)
    row: int | None = None  # the verify row the logits pane shows (None: the current logits)
    stage: int | None = None  # the last round's stage the notice replays (0 draft ... 3 cut)

    # -- its changes, each named after what happened ----------------------------------------
    def hold(self, token: int) -> None:
        """A pick that waits for the next verify batch (the reply's first, from the prompt)."""
        self.pending = token

    def verified(self, rec: StepRecord, marks: SpecMarks) -> None:
        """A round's verify decode: its last pick waits, the logits pane is on the current row."""
        assert rec.spec is not None
        self.pending, self.record, self.row = rec.spec.picks[-1], rec, None
        self.marks, self.stage = marks, None

    def show_row(self, row: int | None) -> None:
        """The verify row the logits pane shows (None: the current logits)."""
        self.row = row

    def show_stage(self, stage: int | None) -> None:
        """The stage of the last round the notice replays (None: the round as a whole)."""
        self.stage = stage

    def take_pending(self) -> int | None:
        """The waiting pick, handed over to be decoded alone (or dropped); none waits after."""
        token, self.pending, self.row, self.stage = self.pending, None, None, None
        self.marks = SpecMarks(summary=self.summary())
        return token

    def decoded_alone(self, ms: float) -> None:
        """A one-token decode outside a round: the plain figure the speed-up is against."""
        self.plain_ms.append(ms)

    def summary(self, short: bool = False) -> str | None:
        """``spec 47% of 19 · 3.25 tok/decode · 0.79x plain``: accepted over drafted, tokens
        emitted per llama_decode, and the rounds' tokens per second of decode time (verify,
        one-token and draft-model decodes) over this run's plain one-token decodes'.
        ``short``: the same figures in fewer words, for a narrow header."""
        st = self.spec.stats
        if not (st.rounds or st.plain):
            return None
        parts = []
        if st.acceptance is not None:
            parts.append(f"spec {st.acceptance:.0%} of {st.drafted}")
        else:
            parts.append("spec: none drafted" if short else "spec: nothing drafted yet")
        if st.tokens_per_decode is not None:
            parts.append(
                f"{st.tokens_per_decode:.2f}/decode"
                if short
                else f"{st.tokens_per_decode:.2f} tok/decode"
            )
        ms = st.verify_ms + st.plain_ms + st.draft_ms
        base = self.plain_ms
        if ms > 0 and base:
            one = sum(base) / len(base)  # ms of one plain token in this run
            parts.append(f"{st.emitted / ms * one:.2f}x plain")
        elif st.draft_ms > 0:  # no plain decode to compare with: say what the draft cost
            parts.append(
                f"draft {st.draft_ms:.0f} vs verify {st.verify_ms:.0f} ms"
                if short
                else f"draft {st.draft_ms:.0f} ms vs verify {st.verify_ms:.0f} ms"
            )
        return " · ".join(parts)
