"""The conversation pane's incremental text against a fresh build."""

from __future__ import annotations

from tui.widgets.flow import FlowLines
from tui.widgets.text import ConversationPane
from tui.widgets.text_flow import TextFlow


def _lines(pane: ConversationPane) -> list[list[tuple[str, object]]]:
    return [[(s.text, s.style) for s in line] for line in pane.flow.lines]


def check_incremental(pane: ConversationPane) -> None:
    v = pane.view
    assert v is not None
    assert pane.plain == pane.build(v).plain  # the same text as the Rich builder
    incremental = _lines(pane)
    kept = (pane._text, pane.flow, pane._atoms)
    pane._text, pane.flow, pane._atoms = TextFlow(), FlowLines(), []
    pane.show(v)
    fresh = _lines(pane)
    pane._text, pane.flow, pane._atoms = kept
    assert incremental == fresh
