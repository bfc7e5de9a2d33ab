"""Step records as JSON Lines: the format of ``tokenstep trace`` and of saved sessions.

The records themselves come from :func:`tui.engine.run.loop.generate`; this module only writes
them down (arrays rounded, token pieces shown with their bytes)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Protocol

import numpy as np

from ..model.tokens import display_bytes
from ..record.attention_store import StoredInts, is_stored

if TYPE_CHECKING:
    from ..model.kvcache import KVLayout
    from ..sampler.chain_result import ChainResult
    from .step import StepRecord


class _Pieces(Protocol):
    def piece(self, token: int) -> bytes: ...


class Source(Protocol):
    """What a record needs from its backend: the local Engine or the remote one."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def layout(self) -> KVLayout: ...

    @property
    def vocab(self) -> _Pieces: ...

    @property
    def flash_attn_resolved(self) -> str: ...


def _piece(engine: Source, token: int) -> dict[str, Any]:
    b = engine.vocab.piece(token)
    return {"id": token, "piece": display_bytes(b), "bytes": b.hex()}


def record_to_dict(engine: Source, rec: StepRecord, *, weights: bool = True) -> dict[str, Any]:
    """The trace's JSON for one record. ``weights=False`` (saved sessions) leaves the
    attention weights out, keeping their shape: as JSON text they are most of a session file
    (one prefill record of 23 MB), and ``--resume`` re-prefills with the capture on, which
    computes the weights of the context again."""
    d: dict[str, Any] = {
        "step": rec.index,
        "phase": rec.phase,
        "chunk": list(rec.chunk),
        "reused": rec.reused,
        "batch": [
            {
                **_piece(engine, t.id),
                "pos": t.pos,
                "seq": t.seq_ids[0] if len(t.seq_ids) == 1 else list(t.seq_ids),
                "logits": t.logits,
            }
            for t in rec.call.tokens
        ],
        "ubatches": [list(u) for u in rec.call.ubatches],
        "decode_ms": round(rec.decode_ms, 3),
        "flash_attn": engine.flash_attn_resolved,
        "kv": {
            "used": rec.kv_used,
            "n_ctx": engine.n_ctx,
            # Over llama-server the cache's bytes are not known here (None, not 0).
            "bytes": rec.kv_bytes if rec.server is None else None,
            "bytes_per_token": engine.layout.bytes_per_token if rec.server is None else None,
            "check": "ok" if not rec.kv_problems else rec.kv_problems,
        },
    }
    if rec.has_logits:
        chain = rec.chain
        ids = [c.id for c in rec.top]
        p_final = chain.p_final_many(ids) if chain else [None] * len(ids)
        cut_by = chain.cut_by_many(ids) if chain else [None] * len(ids)
        # Over llama-server the top candidates carry logprobs: logits up to a constant.
        logit_key = "logit" if rec.server is None else "logprob"
        d["top"] = [
            {
                "id": c.id,
                "piece": display_bytes(c.piece),
                logit_key: round(c.logit, 5),
                "p": round(c.p, 6),
                "p_final": round(pf, 6) if pf is not None else None,
                "cut_by": cb,
            }
            for c, pf, cb in zip(rec.top, p_final, cut_by, strict=True)
        ]
        d["entropy_bits"] = round(rec.entropy, 4)
        if chain is not None:
            d["stages"] = stages_to_dicts(chain, ids, list(cut_by))
            if chain.n_forbidden or chain.grammar_first:
                d["grammar"] = {"forbidden": chain.n_forbidden, "resampled": chain.grammar_first}
            if chain.mu is not None:
                d["mirostat_mu"] = round(chain.mu, 5)
        d["sampled"] = _piece(engine, rec.sampled) if rec.sampled is not None else None
        d["forced"] = rec.forced
        d["eog"] = rec.eog
        if rec.settings is not None:
            d["settings"] = rec.settings.to_dict()
    if rec.server is not None:  # the llama-server request behind this record
        d["server"] = rec.server.to_dict()
        d["entropy_bits_bound"] = "upper bound: only the top K are known"
    if rec.shift is not None:  # a context shift made room just before this call
        d["shift"] = {
            "n_keep": rec.shift.n_keep,
            "n_discard": rec.shift.n_discard,
            "forgotten": [_piece(engine, f.token) | {"pos": f.pos} for f in rec.shift.forgotten],
        }
    if rec.spec is not None:  # a draft-verify round (--spec-type)
        sp = rec.spec
        d["spec"] = {
            "type": sp.type,
            "draft": list(sp.draft),
            "accepted": sp.accepted,
            "picks": list(sp.picks),
            "removed": sp.removed,
            "draft_ms": round(sp.draft_ms, 3),
            "draft_decodes": sp.draft_decodes,
            **({"why_none": sp.why_none} if sp.why_none else {}),
            "rows": [
                {
                    "pick": r.pick,
                    "top": [{"id": c.id, "logit": round(c.logit, 5)} for c in r.top[:5]],
                }
                for r in sp.rows
            ],
        }
    if rec.rows:  # several sequences in this call (after a fork)
        d["seqs"] = {
            str(s): {
                "token": _piece(engine, r.token),
                "pos": r.pos,
                "top": [{"id": c.id, "logit": round(c.logit, 5)} for c in r.top[:5]],
                "sampled": _piece(engine, r.sampled) if r.sampled is not None else None,
            }
            for s, r in rec.rows.items()
        }
    for key, value in rec.extras.items():
        if key == "attention" and not weights:
            d["attention_shape"] = {str(k): list(np.shape(v)) for k, v in value.items()}
            continue
        d[key] = jsonable(value)
    return d


def stages_to_dicts(
    chain: ChainResult, top: list[int], cut_by: list[str | None]
) -> list[dict[str, Any]]:
    """Every stage in order: its parameters, the count after it, and among the top
    candidates the ones it cut and the ones whose logit it changed (and why). Under a grammar
    ``survivors`` is llama.cpp's own count (top-k keeps its k even where the grammar left
    fewer, the rest at -inf) and ``allowed`` the survivors the grammar allows, the count the
    app's panes show (:meth:`ChainResult.shown_counts`)."""
    out = []
    in_top = set(top)
    shown = chain.shown_counts() if chain.allowed is not None else None
    for i, st in enumerate(chain.stages):
        e: dict[str, Any] = {"name": st.name, "param": st.param, "survivors": st.n}
        if shown is not None:
            e["allowed"] = shown[i]
        if st.key:
            e["sampler"] = st.key
        if st.params:
            e["params"] = jsonable(st.params)
        e["cut"] = [t for t, cb in zip(top, cut_by, strict=True) if cb == st.name]
        moved = [
            {"id": t, "before": round(a, 5), "after": round(b, 5), "why": st.why.get(t)}
            for t, a, b in st.changed
            if t in in_top
        ]
        if moved:
            e["changed"] = moved
        if st.changed:
            e["n_changed"] = len(st.changed)
        if st.removed:
            e["removed"] = st.removed
        if st.note:
            e["note"] = st.note
        out.append(e)
    return out


def jsonable(value: Any) -> Any:
    """Observers' extras as JSON: arrays rounded to 4 decimals, dict keys as strings."""
    if is_stored(value):  # moved to the attention weight store: read it back
        value = value.tolist() if isinstance(value, StoredInts) else np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iub":
            return value.tolist()
        return np.round(value.astype(np.float64), 4).tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps makes one per call


def dumps(engine: Source, rec: StepRecord) -> str:
    return _ENCODE(record_to_dict(engine, rec))


class LineWriter:
    """``tokenstep trace``'s output, built and written on a thread of its own: the decode
    thread hands over a finished record (and the run-record events that go after it) and
    goes on to the next decode; the JSON is built while that decode runs. The queue is
    bounded (a slow reader makes the decode thread wait, never memory grow); a write error
    (a closed pipe) is raised on the decode thread at the next :meth:`put` or :meth:`close`."""

    def __init__(
        self, engine: Source, out: IO[str], redact: Callable[[str], str], *, build: bool = True
    ) -> None:
        """``build=False``: the JSON is built on the caller's thread and only written here (a
        server backend's pieces come over its one HTTP connection, which the decode thread
        uses between records)."""
        self._engine, self._out, self._redact, self._build = engine, out, redact, build
        self._q: queue.Queue[tuple[StepRecord | str, tuple[Any, ...]] | None] = queue.Queue(64)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
        self._thread.start()

    def put(self, rec: StepRecord, events: tuple[Any, ...] = ()) -> None:
        self._raise()
        self._q.put((rec if self._build else dumps(self._engine, rec), events))

    def close(self) -> None:
        """Write what is queued, flush, and stop the thread."""
        self._q.put(None)
        self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        from ..record.run_record import event_to_dict

        while (item := self._q.get()) is not None:
            if self._error is not None:
                continue  # drain: the decode thread stops at its next put
            rec, events = item
            try:
                lines = [rec if isinstance(rec, str) else dumps(self._engine, rec)]
                lines += [_ENCODE(event_to_dict(ev)) for ev in events]
                self._out.write("".join(self._redact(line) + "\n" for line in lines))
                self._out.flush()
            except BaseException as exc:
                self._error = exc
