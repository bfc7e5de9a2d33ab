"""The timeline pane's figures are functions of the run's record
(:meth:`tui.engine.record.run_record.RunRecord.timeline`): the newest ``llama_decode`` calls to draw
and totals over every call of the chat."""

from __future__ import annotations

from ..engine.record.run_record import TIMELINE_KEEP
from ..engine.record.run_record import DecodeTotals as TimelineTotals

__all__ = ["TIMELINE_KEEP", "TimelineTotals"]
