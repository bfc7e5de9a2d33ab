"""What the panes say about a model that runs on llama-server (None for a local model).

Built on the worker thread from the newest record's :class:`~tui.engine.wire.remote_step.ServerStep`:
how many candidates crossed HTTP, who picks and how exact that pick is, the server's own time
beside the round trip, and what its cache reused.

Over HTTP only the top K of a row are known, the server's slot holds tokens but no cells tokenstep
can see, and a request that failed sent nothing: the wording here (rewind, a pick not sent, a lost
cache) says so, never the local engine's "scores kept" or "KV cells".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.wire.remote_step import SERVER_PICK_NOTE

if TYPE_CHECKING:
    from ..engine.run.backend import Backend
    from ..engine.run.step import StepRecord


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
    slot_cached: int = 0  # tokens the slot held after the newest answered request
    sent: int = 0  # token ids the request behind the shown row sent (the whole context)
    unsent: int | None = None  # a pick whose request failed: the next step sends it again
    unsent_piece: bytes = b""
    server_timed: bool = True  # False: the server reports no timings (round trip only)
    warning: str | None = None  # what the server saw or sent that is not what the panes hold
    as_text: bool = False  # the server takes text only: the prompt went as the ids' text
    post_note: str | None = None  # the server's own post-chain probabilities beside ours

    def lines(self) -> tuple[str, str]:
        """Two short lines for the logits pane: what crossed HTTP, and how exact the pick is."""
        first = f"{self.top_of} hold {self.mass:.1%} · log p = logit + c"
        if self.cache_lost:
            first += " · the server had lost its cache"
        if self.warning:
            first += " · ⚠ see the notice"
        if self.pick == "server":
            second = "server's pick: its RNG restarts every request (same seed each step)"
        elif self.pick_note is None:
            second = "tokenstep's pick, exact: survivors inside the top K"
        else:
            second = self.pick_note.split(" (")[0]  # "approximation: the chain saw only ..."
        if self.post_note:
            second += " · " + self.post_note.split(" (")[0]
        return first, second


def remote_view(engine: Backend) -> RemoteView | None:
    """The remote summary of ``engine``; None for a local context or a backend with the whole
    vocabulary (the capabilities say which, never the type)."""
    server = engine.server
    if server is None or engine.capabilities.full_vocab or not engine.records:
        return None
    pick = server.pick
    rec = engine.records.get(engine.logits_record) if engine.logits_record is not None else None
    rec = rec or engine.records[-1]
    step = rec.server
    if step is None:
        return None
    note = server.exactness() if pick == "tokenstep" else SERVER_PICK_NOTE
    newest = engine.records[-1].server
    unsent = server.unsent_pick
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
        slot_cached=newest.tokens_cached if newest is not None else step.tokens_cached,
        sent=step.prompt_tokens,
        unsent=unsent,
        unsent_piece=engine.vocab.piece(unsent) if unsent is not None else b"",
        server_timed=step.server_timings,
        warning=step.warning,
        as_text=not server.ids_prompt,
        post_note=step.post_note,
    )


def lost_cache_note(rec: StepRecord) -> str:
    """One sentence when llama-server re-evaluated tokens its slot held before (it restarted,
    or another client used the slot); "" otherwise. The pane's "55 evaluated, 0 from its cache"
    alone does not say that anything was lost."""
    step = rec.server
    if step is None:
        return ""
    if step.warning:  # an OpenAI-compatible server's text prompt or candidate texts
        return " " + step.warning
    if not step.cache_lost:
        return ""
    return (
        f" The server had lost its cache (restarted, or another client used slot {step.slot}): "
        f"it evaluated {step.prompt_n} of the {step.prompt_tokens} tokens again, "
        f"{step.cache_n} from its cache."
    )


def prefill_note(rec: StepRecord) -> str | None:
    """A message's prefill over HTTP (None for a local context): what was sent and what the
    server evaluated or found in its slot's cache, as its own timings say."""
    step = rec.server
    if step is None:
        return None
    if not step.server_timings:
        return (
            f"Prefill on the server: {step.prompt_tokens} tokens sent; it reports no timings or "
            "cache counts, only the round trip is measured"
        )
    return (
        f"Prefill on the server: {step.prompt_tokens} token ids sent, {step.prompt_n} evaluated, "
        f"{step.cache_n} from its slot's cache"
    )


def rewind_note(engine: Backend, removed: int) -> str | None:
    """The rewind notice over HTTP (None for a local context, whose notice counts KV cells):
    nothing is sent, the slot keeps its cache, and the next request sends the shorter prefix."""
    server = engine.server
    if server is None or engine.capabilities.kv_cells:
        return None
    newest = engine.records[-1].server if engine.records else None
    held = newest.tokens_cached if newest is not None else 0
    if engine.logits is not None:
        then = "and its pick"
        how = (
            f"the top {newest.n_top if newest else server.n_probs} logprobs for the new last "
            "token came from memory"
        )
    else:
        then = "to ask for their logprobs again"
        how = "its logprobs were not kept"
    return (
        f"Rewound {removed} token: nothing sent; → sends the {engine.n_past} kept ids {then} "
        f"(the server's slot held {held} and reuses the common prefix); {how}."
    )


def where_it_runs(engine: Backend) -> str | None:
    """The header's note on where the model runs: the server's URL and slot, or (local) where
    llama.cpp put the layers and the KV cache when it says anything beyond the plain CPU."""
    if (server := engine.server) is not None:  # a model served elsewhere, in one of its slots
        return f"on {engine.capabilities.name}, slot {server.slot}"
    local = engine.local
    placement = local.placement if local is not None else None
    if placement is None or (not placement.gpu_build and placement.asked_layers == "0"):
        return None  # a CPU build asked for nothing: the header stays as it was
    return str(placement.describe())
