"""The Attention and Decode-anatomy panes as app tabs (keys 6 and 7): each draws a ``View``.

Thin wrappers around :class:`~tui.widgets.attention.AttentionPane` and
:class:`~tui.widgets.anatomy.AnatomyPane` with the ``show(view)`` method every tab has. The
data comes from ``view.attention`` (:class:`~tui.worker.attention.AttentionView`), built on
the decode thread. Each tab first asks ``view.capabilities`` (a
:class:`~tui.engine.run.backend.Capabilities`) whether the backend can give what it draws
(attention weights, the compute graph); when not, it shows the sentence ``missing`` returns
instead of whatever it drew before.
"""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from .anatomy import AnatomyPane
from .attention import AttentionPane
from .keys import pane_bindings


class AttentionTab(AttentionPane):
    """Heatmap of the captured layer; the cursor token's ranked keys below it."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._head_restored = False

    def show(self, view: Any) -> None:
        missing = view.capabilities.missing("attention")
        if missing is not None:
            self.update_from(None, view.text.pieces, n_layer=0, status=missing)
            return
        a = view.attention
        if a is None:
            self.update_from(None, view.text.pieces, n_layer=0, status="attention unavailable")
            return
        if not self._head_restored:  # later the pane's own keys choose the head
            self._head_restored = True
            self.head = a.head
        if a.att is None:
            self.att_layer = a.layer
        # Rows are sequence 0's tokens by position: the same order as the view's pieces.
        keys = "[ ] layer · ← → head · m mean · s scale · ↑↓ or click a row"
        status = f"{a.status} · {keys}" if a.att is not None else a.status
        self.update_from(a.att, view.text.pieces, n_layer=a.n_layer, status=status)


class AnatomyTab(AnatomyPane):
    """embedding → layers → norm → lm_head with the model's sizes and the last graph census."""

    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in pane_bindings("anatomy")]

    def show(self, view: Any) -> None:
        missing = view.capabilities.missing("graph")
        if missing is not None:
            self.show_unavailable(missing)
            return
        a = view.attention
        if a is None:
            return
        if a.census is not None:
            status = "census of the last decode's graph"
        elif a.installed:
            status = "the census is taken from the next decode"
        else:
            status = "graph census needs the eval callback: press a (attention) to install it"
        self.update_from(a.info, a.census, a.profile, status=status)
