"""The commands the UI puts on the worker's queue: one small frozen dataclass each.

The worker dispatches on the command's type (:class:`tui.worker.thread.Worker` keeps a table
from class to handler), so the handler of, say, :class:`Verify` is found by searching for the
class. Every command runs on the worker thread, between two decode calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Send:
    text: str  # "" sends the queued message, if any


@dataclass(frozen=True)
class Step:
    """→: one decode (pauses autoplay first if a reply is playing)."""


@dataclass(frozen=True)
class Force:
    token: int  # take this token instead of sampling


@dataclass(frozen=True)
class TogglePlay:
    pass


@dataclass(frozen=True)
class Pause:
    pass


@dataclass(frozen=True)
class Rewind:
    n: int = 1


@dataclass(frozen=True)
class Adjust:
    name: str  # "temp", "top_k", "top_p" or "min_p"
    direction: int  # +1 one rung up the ladder, -1 one down


@dataclass(frozen=True)
class ChainEdit:
    op: str  # "cursor", "move", "toggle" or "set"
    arg: str = ""  # cursor/move: "-1" or "1"; set: "NAME VALUE" (llama.cpp's flag name)


@dataclass(frozen=True)
class Greedy:
    pass


@dataclass(frozen=True)
class Seed:
    delta: int = 1


@dataclass(frozen=True)
class NewChat:
    pass


@dataclass(frozen=True)
class Save:
    path: str


@dataclass(frozen=True)
class AttentionToggle:
    pass


@dataclass(frozen=True)
class AttentionLayer:
    layer: int


@dataclass(frozen=True)
class AttentionHead:
    head: int | None  # None = mean over heads


@dataclass(frozen=True)
class AttentionTabs:
    matrix: bool  # the Attention tab is showing
    census: bool  # the Anatomy tab is showing


@dataclass(frozen=True)
class LensTab:
    visible: bool  # the Lens tab is showing: capture and project each step


@dataclass(frozen=True)
class LensMode:
    """Switch the Lens pane between the preview and the last step."""


@dataclass(frozen=True)
class Verify:
    mode: str = "batched"


@dataclass(frozen=True)
class Fork:
    pass


@dataclass(frozen=True)
class JumpPath:
    branch: int  # a path not taken of this turn (its number in the tree pane)


@dataclass(frozen=True)
class PathsShown:
    shown: bool  # the tree pane is showing: rewinds keep their cells in a parked sequence


@dataclass(frozen=True)
class SurpriseScale:
    """Cycle the text pane's surprise map: off, p, p', entropy."""


@dataclass(frozen=True)
class SpecRow:
    """--spec-type: move the logits pane across the last verify batch's rows (0: back to the
    current row)."""

    delta: int


@dataclass(frozen=True)
class SpecStage:
    """--spec-type: the notice replays the last round's next stage (draft, verify batch,
    accept, cut the cache), from its record."""


@dataclass(frozen=True)
class Call:
    """Run ``fn`` on the worker thread between decode calls (tests, tools: the engine may only
    be touched there), like any key press."""

    fn: Callable[[], object]


@dataclass(frozen=True)
class Look(Call):
    """A call that only looks (attention's every layer, the lens's grid): like the other
    looking keys it never decodes a pick waiting for a batch (``spec_step.KEEPS_PENDING``)."""


@dataclass(frozen=True)
class Stop:
    pass


Command = (
    Send
    | ChainEdit
    | Step
    | Force
    | TogglePlay
    | Pause
    | Rewind
    | Adjust
    | Greedy
    | Seed
    | NewChat
    | Save
    | AttentionToggle
    | AttentionLayer
    | AttentionHead
    | AttentionTabs
    | LensTab
    | LensMode
    | Verify
    | Fork
    | JumpPath
    | PathsShown
    | SurpriseScale
    | SpecRow
    | SpecStage
    | Call
    | Look
    | Stop
)


def attention_command(name: str, args: tuple[Any, ...], capture_all: Callable[[], None]) -> Command:
    """The attention pane's commands by name: "toggle", "all" (every layer at once), "layer" n,
    "head" h (None = the mean), "tabs" (the matrix and census tabs showing or not)."""
    if name == "toggle":
        return AttentionToggle()
    if name == "all":
        return Look(capture_all)
    if name == "layer":
        return AttentionLayer(int(args[0]))
    if name == "head":
        return AttentionHead(args[0])
    if name == "tabs":
        return AttentionTabs(bool(args[0]), bool(args[1]))
    raise ValueError(name)


def lens_command(name: str, args: tuple[Any, ...], toggle_grid: Callable[[], None]) -> Command:
    """The lens's commands by name: "tab" visible (the Lens tab showing or not), "mode" (the
    preview or the last step), "grid" (G: the position x layer grid)."""
    if name == "tab":
        return LensTab(bool(args[0]))
    if name == "mode":
        return LensMode()
    if name == "grid":
        return Look(toggle_grid)
    raise ValueError(name)
