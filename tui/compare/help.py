"""The compare screen's help (``?`` or F1): its keys from :mod:`.screen_keys` and what the
figures mean, drawn by the app's own help builder and screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets.help import H, HelpScreen, HelpText, _Help
from .screen_keys import KEYS
from .strip import KL_BANDS

KEY_CELLS = 7  # what the app's help grid shows of a key (9 cells, 2 of them indent)


def compare_help(*, bound: bool = False, free: bool = False) -> HelpText:
    t = _Help()
    t.append("tokenstep compare", H)
    t.append(
        " ran A and B on the same tokens in lockstep and kept, per position, both top-K lists "
        "and what separates them. Nothing here is computed again: every figure is the run's "
        "record, formatted.\n\n"
    )
    t.append("Keys\n", H)
    for k in KEYS:
        if k.label and (free or k.action != "toggle_mode"):
            if len(k.label) <= KEY_CELLS:
                t.row(k.label, k.help)
            else:  # the key column would cut it: the label leads the line instead
                t.row("", f"{k.label}: {k.help}")
    t.append("\nThe figures\n", H)
    t.row(
        "KL",
        "KL(A‖B) = Σ p_A·(log p_A − log p_B) over the vocabulary, in nats, at one "
        "position: how many nats B loses coding A's next-token distribution. 0 is the same "
        "distribution.",
    )
    if bound:
        t.row(
            "bound",
            "B is a server: it sent its top K only, so B's p outside them is not "
            "known and the KL shown is a bound computed from the top K, not the full sum.",
        )
    t.row(
        "top-1",
        "the token each side ranks first; a flip is a position where they differ "
        "(n/N jump between flips).",
    )
    t.row(
        "rank Δp",
        "where A's pick (★, the next token) stands in B (rank 1 is B's top-1, as the # "
        "column counts; the JSON's rank_in_b counts from 0) and B's p minus A's p for it.",
    )
    t.row(
        "Δlogit",
        "max |Δlogit|: the largest difference of one token's logit between A and B at the position.",
    )
    t.row(
        "summary",
        "n positions compared; the mean, median, 99th percentile and maximum KL; "
        "the share of positions with the same top-1; the first flip.",
    )
    t.row(
        "KV",
        "the memory each side's KV cache takes, as llama.cpp allocated it, and B's as "
        "a share of A's.",
    )
    t.append("\nColours of the strip (KL in nats)\n", H)
    t.row(
        "",
        "  ".join(label for _, _, label in reversed(KL_BANDS)) + "; grey: no KL (the "
        "first token has no prediction before it)",
    )
    t.append("\nEsc, q, ? or F1 closes this screen.")
    return t.done()


class CompareHelp(HelpScreen):
    """The app's help screen (its frame, scrolling and closing keys) with this text."""

    def __init__(self, *, bound: bool = False, free: bool = False) -> None:
        super().__init__(None)
        self.bound = bound
        self.free = free

    def compose(self) -> ComposeResult:
        box = VerticalScroll(Static(compare_help(bound=self.bound, free=self.free)))
        box.border_title = "Help · compare"
        box.border_subtitle = "↑↓ PgUp PgDn scroll · Esc closes"
        yield box
