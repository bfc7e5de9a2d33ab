"""Step records as JSON Lines: the format of ``tokenstep trace`` and of saved sessions.

The records themselves come from :func:`tui.engine.loop.generate`; this module only writes
them down (arrays rounded, token pieces shown with their bytes)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from .tokens import display_bytes

if TYPE_CHECKING:
    from .session import Engine
    from .step import StepRecord


def _piece(engine: Engine, token: int) -> dict[str, Any]:
    b = engine.vocab.piece(token)
    return {"id": token, "piece": display_bytes(b), "bytes": b.hex()}


def record_to_dict(engine: Engine, rec: StepRecord) -> dict[str, Any]:
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
            "bytes": rec.kv_bytes,
            "bytes_per_token": engine.layout.bytes_per_token,
            "check": "ok" if not rec.kv_problems else rec.kv_problems,
        },
    }
    if rec.has_logits:
        chain = rec.chain
        ids = [c.id for c in rec.top]
        p_final = chain.p_final_many(ids) if chain else [None] * len(ids)
        cut_by = chain.cut_by_many(ids) if chain else [None] * len(ids)
        d["top"] = [
            {
                "id": c.id,
                "piece": display_bytes(c.piece),
                "logit": round(c.logit, 5),
                "p": round(c.p, 6),
                "p_final": round(pf, 6) if pf is not None else None,
                "cut_by": cb,
            }
            for c, pf, cb in zip(rec.top, p_final, cut_by, strict=True)
        ]
        d["entropy_bits"] = round(rec.entropy, 4)
        if chain is not None:
            d["stages"] = [
                {"name": s.name, "param": s.param, "survivors": s.n} for s in chain.stages
            ]
        d["sampled"] = _piece(engine, rec.sampled) if rec.sampled is not None else None
        d["forced"] = rec.forced
        d["eog"] = rec.eog
        if rec.settings is not None:
            d["settings"] = rec.settings.to_dict()
    if rec.shift is not None:  # a context shift made room just before this call
        d["shift"] = {
            "n_keep": rec.shift.n_keep,
            "n_discard": rec.shift.n_discard,
            "forgotten": [_piece(engine, f.token) | {"pos": f.pos} for f in rec.shift.forgotten],
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
        d[key] = jsonable(value)
    return d


def jsonable(value: Any) -> Any:
    """Observers' extras as JSON: arrays rounded to 4 decimals, dict keys as strings."""
    if isinstance(value, np.ndarray):
        return np.round(value.astype(np.float64), 4).tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps makes one per call


def dumps(engine: Engine, rec: StepRecord) -> str:
    return _ENCODE(record_to_dict(engine, rec))
