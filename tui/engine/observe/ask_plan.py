"""The ask phase of one decode, recorded so the next decodes of the same graph can replay it.

With ``cb_eval`` set, the scheduler asks the callback about every node of every graph (~1000
per decode) before running it. Reading each node's name there is what capture would cost on
every decode; instead the first decode of a graph reads the names and records an
:class:`AskPlan`: the node addresses in order, with a :class:`Marked` entry for each node the
tap did something with. llama.cpp reuses the graph between decodes of the same shape, and when
it rebuilds one it builds it in the same memory, in the same order: the same node addresses in
the same order are the same graph. So a later decode only compares each asked address with
the plan's next entry (:class:`Replay`); a decode whose nodes differ (a prefill after steps,
a K shift) falls back to reading names from that node on, keeping the part that matched.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Action(enum.Enum):
    """What the ask phase did with a node."""

    COPY = "copy"  # answered True: the node's data is copied when it is ready (one graph split)
    PEEK = "peek"  # read the node's graph inputs right away (``peek``) and answered False


@dataclass(frozen=True, slots=True)
class Marked:
    """A plan entry for a node that needed something. Replaying it checks the name again.

    It never equals an address (an int), so the replay's one comparison sends it to the slow
    path, which checks ``ptr`` and ``name`` and does ``action`` for graph ``graph``."""

    ptr: int
    action: Action
    name: bytes
    graph: int  # index of the ubatch graph in the decode


class PlanEnd:
    """The entry after the last node. No node matches it: a decode with more nodes than the
    plan diverges there, and one that stops right before it ran exactly the plan's nodes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


END = PlanEnd()

PlanEntry = int | Marked | PlanEnd  # a node address not needed, a marked node, or the end


@dataclass
class AskPlan:
    """The ask phase of one decode: ``ptrs`` are the entries for the nodes asked about, in
    order (the address for a node that needed nothing, a :class:`Marked` for one that did),
    ending with :data:`END`."""

    key: tuple[Any, ...]  # what the decisions depend on: the wanted names and the hook
    ptrs: list[PlanEntry]
    starts: list[int]  # index in ptrs of each ubatch graph's first node

    def prefix(self, i: int) -> tuple[list[PlanEntry], list[int]]:
        """The entries before index ``i`` and the starts of the graphs that begin there."""
        return self.ptrs[:i], [s for s in self.starts if s < i]


class Replay:
    """Walks an :class:`AskPlan` during one decode, one entry per asked node.

    :attr:`next` returns ``(index in the plan, entry)``; the callback compares the entry with
    the asked address, and that comparison is the whole cost of a node the plan does not mark.
    """

    __slots__ = ("next", "plan", "_entries")

    def __init__(self, plan: AskPlan) -> None:
        self.plan = plan
        self._entries = enumerate(plan.ptrs)
        self.next: Callable[[], tuple[int, PlanEntry]] = self._entries.__next__

    def ran_whole_plan(self) -> bool:
        """After the decode: True when the nodes asked were exactly the plan's (only
        :data:`END` is left); False when the decode asked about fewer nodes."""
        rest = next(self._entries, None)
        return rest is not None and rest[1] is END
