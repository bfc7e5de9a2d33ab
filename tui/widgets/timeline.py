"""Tab 3 (key 3), timeline: every ``llama_decode`` call in order, its width from its measured time.

A prefill is one wide block (many tokens in one call); each decode step is a narrow cell; a
speculative verify (``--spec-type``) is a magenta block labelled with its k + 1 tokens. The
rates are computed separately for prefill and decode from the measured ``llama_decode`` times
(sampling and drawing are not included)."""

from __future__ import annotations

import numpy as np
from rich.style import Style
from rich.text import Text

from ..worker.views import View
from .common import DIM, Pane, fmt_ms, fmt_rate, show_timings

PREFILL = Style(color="white", bgcolor="dodger_blue3", bold=True)
PREFILL_FILL = (Style(color="dodger_blue3"), Style(color="steel_blue1"))
DECODE = (Style(color="green3"), Style(color="spring_green1"))
VERIFY = (Style(color="black", bgcolor="magenta"), Style(color="black", bgcolor="orchid"))
SCALES = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class TimelinePane(Pane):
    def stats(self) -> Text:
        v = self.view
        t = Text(no_wrap=True, overflow="ellipsis")
        if v is None:
            return t
        tot = v.timeline.totals  # over every call of the chat, also those scrolled off
        pn, pms = tot.prefill_tokens, tot.prefill_ms
        dn, dms = tot.decode_tokens, tot.decode_ms
        t.append(" prefill ", PREFILL)
        t.append(f" {_n(tot.prefill_calls, 'call')}, {_n(pn, 'token')}, {fmt_ms(self, pms)} → ")
        t.append(fmt_rate(self, pn, pms), Style(bold=True))
        t.append("\n")
        t.append(" decode  ", Style(color="black", bgcolor="green3", bold=True))
        if not (tot.verify_calls or tot.draft_calls):
            if tot.decode_calls == dn:
                t.append(f" {_n(dn, 'step')}, {fmt_ms(self, dms)} → ")
            else:  # a fork steps its sequences in one call: calls and tokens apart
                t.append(
                    f" {_n(tot.decode_calls, 'call')}, {_n(dn, 'token')}, {fmt_ms(self, dms)} → "
                )
            t.append(fmt_rate(self, dn, dms), Style(bold=True))
            if tot.decode_calls:
                t.append(f" (mean {fmt_ms(self, dms / tot.decode_calls)})", DIM)
            return t
        # --spec-type: calls and emitted tokens apart (a verify's rejected rows emit nothing),
        # and the draft model's own decodes in the time the tokens cost.
        t.append(f" {_n(tot.decode_calls, 'call')} emitted {_n(dn, 'token')}")
        if tot.draft_calls:
            t.append(f" (+{tot.draft_calls:,} draft-model)")
        total_ms = dms + tot.draft_ms
        t.append(f", {fmt_ms(self, total_ms)} → ")
        t.append(fmt_rate(self, dn, total_ms), Style(bold=True))
        return t

    def render(self) -> Text:
        v = self.view
        t = Text()
        if v is None:
            return t
        t.append_text(self.stats())
        t.append("\n")
        if not v.timeline.calls:
            t.append("No llama_decode calls yet.", DIM)
            return t
        width = max(self.size.width, 20)
        timed = show_timings(self)
        scale, fits, first, ws = self._layout()
        cells: list[tuple[str, Style]] = []
        k = j = 0  # alternate shades so neighbouring calls stay apart
        for i in range(first, len(ws)):
            ph, n, ms = v.timeline.calls[i]
            w = ws[i]
            if ph == "prefill":
                label = f" {n} tok {fmt_ms(self, ms)} "
                if len(label) > w:
                    label = ""
                cells += [(ch, PREFILL) for ch in label]
                cells += [("█", PREFILL_FILL[j % 2])] * (w - len(label))
                j += 1
            elif ph == "verify":  # --spec-type: k + 1 tokens in one decode, its width its time
                label = f"{n}"[: max(w - 1, 0)]
                cells += [(ch, VERIFY[k % 2]) for ch in label.ljust(w)]
                k += 1
            else:
                block = "▌" if w == 1 else "█" * (w - 1) + "▏"
                cells += [(ch, DECODE[k % 2]) for ch in block]
                k += 1
        if timed and fits:
            t.append_text(_ruler(width, scale))
            t.append("\n")
        body = Text(no_wrap=True)
        for start in range(0, len(cells), width):
            if start:
                body.append("\n")
            for ch, st in cells[start : start + width]:
                body.append(ch, st)
        t.append_text(body)
        self.border_subtitle = self._note(scale, first)
        return t

    def show(self, view: View) -> None:
        super().show(view)
        self._set_note()

    def on_resize(self) -> None:
        # The border is drawn before ``render`` runs: a subtitle set only there named the
        # previous size's scale (z read "1 column = 10 ms" under ticks 2 ms a column apart).
        self._set_note()

    def _set_note(self) -> None:
        if self.view is not None and self.view.timeline.calls:
            scale, _, first, _ = self._layout()
            self.border_subtitle = self._note(scale, first)

    def _note(self, scale: float, first: int) -> str:
        assert self.view is not None
        note = f"1 column = {scale:g} ms" if show_timings(self) else "timings hidden (test mode)"
        older = first + self.view.timeline.older
        if older:
            note += f" · {older:,} older calls scrolled off"
        return note

    def _layout(self) -> tuple[float, bool, int, list[int]]:
        """(ms per column, whether some scale fits every call, the first call shown, each
        shown call's width in columns) for the pane's current size."""
        v = self.view
        assert v is not None
        width = max(self.size.width, 20)
        timed = show_timings(self)
        rows = max(self.size.height - 3 - timed, 1)  # the stats, the ruler, the borders
        room = width * rows

        ms_all = np.fromiter((ms for _, _, ms in v.timeline.calls), np.float64, len(v.timeline.calls))
        prefill = np.fromiter((ph == "prefill" for ph, _, _ in v.timeline.calls), bool, len(v.timeline.calls))

        def widths(scale: float) -> np.ndarray:
            if not timed:
                return np.where(prefill, min(12, width), 1)
            # Uncapped: a long prefill wraps over several rows, as long as its time says.
            return np.maximum(1, np.rint(ms_all / scale)).astype(np.int64)

        scale: float = SCALES[-1]
        fits = False  # some scale fits every call: else bars are clamped to 1 column
        for sc in SCALES:
            if int(widths(sc).sum()) <= room:
                scale, fits = sc, True
                break
        ws = widths(scale).tolist()
        # Keep the newest calls that fit (whole rows of the pane).
        total, first = 0, len(ws)
        while first > 0 and total + ws[first - 1] <= room:
            first -= 1
            total += ws[first]
        return scale, fits, first, ws


def _ruler(width: int, scale: float) -> Text:
    """A scale over the bars: a tick every 10 columns, labelled with the time it stands for."""
    step = 20 if width >= 60 else 10
    line = [" "] * width
    for col in range(0, width, step):
        label = f"├{col * scale:g} ms" if col else "├0"
        for i, ch in enumerate(label):
            if col + i < width:
                line[col + i] = ch
    return Text("".join(line), DIM)


def _n(n: int, word: str) -> str:
    return f"1 {word}" if n == 1 else f"{n:,} {word}s"
