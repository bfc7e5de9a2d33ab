"""The tab strip above the bottom pane: every tab's key and name, drawn to fit its width."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

TABS_SHORT = (
    ("tokens", "1 tok"),
    ("batch", "2 bat"),
    ("timeline", "3 time"),
    ("kv", "4 KV"),
    ("mask", "5 mask"),
    ("attention", "6 att"),
    ("anatomy", "7 anat"),
    ("lens", "8 lens"),
    ("memory", "9 mem"),
    ("cache", "0 cache"),
)
# Tabs reached by a letter key (c, w): on the strip only while showing, after the others.
EXTRA_TABS: tuple[tuple[str, str], ...] = (("run", "c run"), ("paths", "w paths"))
TABS = (
    ("tokens", "1 tokens"),
    ("batch", "2 batch"),
    ("timeline", "3 timeline"),
    ("kv", "4 KV cache"),
    ("mask", "5 mask"),
    ("attention", "6 attention"),
    ("anatomy", "7 anatomy"),
    ("lens", "8 lens"),
    ("memory", "9 memory"),
    ("cache", "0 cache"),
)


def tabstrip(current: str, room: int) -> Text:
    """The tab names, long ones if they fit the strip, else the short ones, else the
    short ones without gaps (every tab stays visible and clickable)."""
    # Narrowest: the tab that shows keeps its name, the others only their key.
    extra = tuple(t for t in EXTRA_TABS if t[0] == current)
    digits = tuple((k, lb if k == current else lb.split()[0]) for k, lb in TABS_SHORT)
    digits += extra
    options = (
        (TABS + extra, " ", " "),
        (TABS_SHORT + extra, " ", " "),
        (TABS_SHORT + extra, "", " "),
    )
    tabs, pad, gap = digits, " ", ""
    for option in options:
        if (
            sum(len(label) + 2 * len(option[1]) + len(option[2]) for _, label in option[0])
            <= room
        ):
            tabs, pad, gap = option
            break
    t = Text(no_wrap=True, overflow="ellipsis")
    for key, label in tabs:
        style = (
            Style(color="black", bgcolor="bright_cyan", bold=True)
            if key == current
            else Style(color="grey70")
        )
        t.append(f"{pad}{label}{pad}", style + Style.from_meta({"@click": f"app.tab('{key}')"}))
        t.append(gap)
    return t

