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

    def lines(self) -> tuple[str, str]:
        """Two short lines for the logits pane: what crossed HTTP, and how exact the pick is."""
        first = f"{self.top_of} hold {self.mass:.1%} · log p = logit + c"
        if self.cache_lost:
            first += " · the server had lost its cache"
        if self.pick == "server":
            second = "server's pick: its RNG restarts every request (same seed each step)"
        elif self.pick_note is None:
            second = "tokenstep's pick, exact: survivors inside the top K"
        else:
            second = self.pick_note.split(" (")[0]  # "approximation: the chain saw only ..."
        return first, second


def remote_view(engine: Any) -> RemoteView | None:
    """The remote summary of ``engine``; None for a backend with the whole vocabulary (the
    capabilities say which, never the type)."""
    if engine.capabilities.full_vocab or not engine.records:
        return None
    pick = str(engine.pick)
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


def where_it_runs(engine: Any) -> str | None:
    """The header's note on where the model runs: llama-server's URL, or (local) where
    llama.cpp put the layers and the KV cache when it says anything beyond the plain CPU."""
    if not engine.capabilities.full_vocab:  # a model served elsewhere, in one of its slots
        slot = getattr(engine, "slot", None)
        return f"on {engine.capabilities.name}" + ("" if slot is None else f", slot {slot}")
    placement = getattr(engine, "placement", None)
    if placement is None or (not placement.gpu_build and placement.asked_layers == "0"):
        return None  # a CPU build asked for nothing: the header stays as it was
    return str(placement.describe())
