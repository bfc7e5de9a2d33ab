"""What the panes say about a model that runs on llama-server (None for a local model).

Built on the worker thread from the newest record's :class:`~tui.engine.remote_step.ServerStep`:
how many candidates crossed HTTP, who picks and how exact that pick is, the server's own time
beside the round trip, and what its cache reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.remote_step import SERVER_PICK_NOTE


@dataclass(frozen=True)
class RemoteView:
    url: str
    pick: str  # "tokenstep" or "server"
    top_of: str  # "top 100 of 49152": every figure from the candidates covers only these
    n_top: int
    mass: float  # the top K's share of the probability mass
    pick_note: str | None  # the approximation, or the server's restarting RNG; None: exact
    server_ms: float  # the server's own evaluation time for the last request
    round_trip_ms: float  # measured here
    cached: int  # tokens the server found in its slot's cache
    evaluated: int  # tokens it evaluated
    cache_lost: bool  # it had lost tokens it held before (restarted, or another client)

    def line(self) -> str:
        """One line for the header and the logits pane."""
        who = "tokenstep's chain on the top K" if self.pick == "tokenstep" else "the server's pick"
        parts = [
            f"{self.top_of} ({self.mass:.1%} of the mass)",
            f"logits known up to a constant, shown as logprobs; pick: {who}",
            f"server {self.server_ms:.1f} ms, round trip {self.round_trip_ms:.1f} ms",
            f"cache {self.cached} reused, {self.evaluated} evaluated",
        ]
        if self.cache_lost:
            parts.append("the server had lost its cache (restarted, or another client)")
        return " · ".join(parts)


def remote_view(engine: Any) -> RemoteView | None:
    """The remote summary of ``engine`` (duck-typed: only a remote backend has ``pick``)."""
    pick = getattr(engine, "pick", None)
    if pick is None or not engine.records:
        return None
    rec = engine.records.get(engine.logits_record) if engine.logits_record is not None else None
    rec = rec or engine.records[-1]
    step = rec.server
    if step is None:
        return None
    note = engine.exactness() if pick == "tokenstep" else SERVER_PICK_NOTE
    return RemoteView(
        url=step.url,
        pick=pick,
        top_of=step.top_of,
        n_top=step.n_top,
        mass=step.mass,
        pick_note=note,
        server_ms=step.prompt_ms + step.predicted_ms,
        round_trip_ms=step.round_trip_ms,
        cached=step.cache_n,
        evaluated=step.prompt_n,
        cache_lost=step.cache_lost,
    )
