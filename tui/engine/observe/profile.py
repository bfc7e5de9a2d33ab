"""Profile mode: the measured time of every graph node of one decode, summed by part and op.

The graph tap answers True for every node in the ask phase, so the scheduler runs and
synchronizes each node on its own and the tap times it (see :mod:`tui.engine.observe.graph_tap`).
That breaks the graph into ~1000 separate runs: a profiled decode is much slower than a
normal one, and :data:`PROFILE_NOTE` says so wherever the numbers are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .census import NodeSeen, sections, split_layer

PROFILE_NOTE = (
    "profile mode: every graph node was run and synchronized on its own to time it, "
    "so this decode was slower than a normal one"
)


@dataclass
class GraphProfile:
    """Measured time per node of one decode (profile mode), summed by part and by op."""

    total_ms: float
    prologue_ms: float
    attention_ms: list[float]  # per layer
    ffn_ms: list[float]  # per layer
    epilogue: dict[str, float]  # node name -> ms (final norm, lm_head)
    by_op: dict[str, float]
    slowest: list[tuple[str, str, float]]  # (name, op, ms)
    other_ms: float = 0.0  # graphs run before the ubatch graphs (K shift)

    @staticmethod
    def combine(parts: list[GraphProfile], other_ms: float = 0.0) -> GraphProfile:
        """Sum the profiles of a decode's ubatch graphs."""
        if not parts:
            return GraphProfile(other_ms, 0.0, [], [], {}, {}, [], other_ms)
        by_op: dict[str, float] = {}
        epi: dict[str, float] = {}
        for p in parts:
            for k, v in p.by_op.items():
                by_op[k] = by_op.get(k, 0.0) + v
            for k, v in p.epilogue.items():
                epi[k] = epi.get(k, 0.0) + v
        slow = sorted((x for p in parts for x in p.slowest), key=lambda x: -x[2])[:10]
        return GraphProfile(
            total_ms=sum(p.total_ms for p in parts) + other_ms,
            prologue_ms=sum(p.prologue_ms for p in parts),
            attention_ms=[sum(x) for x in zip(*(p.attention_ms for p in parts), strict=True)],
            ffn_ms=[sum(x) for x in zip(*(p.ffn_ms for p in parts), strict=True)],
            epilogue=epi,
            by_op=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
            slowest=slow,
            other_ms=other_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        r = 4
        return {
            "note": PROFILE_NOTE,
            "total_ms": round(self.total_ms, r),
            "prologue_ms": round(self.prologue_ms, r),
            "attention_ms": [round(x, r) for x in self.attention_ms],
            "ffn_ms": [round(x, r) for x in self.ffn_ms],
            "epilogue_ms": {k: round(v, r) for k, v in self.epilogue.items()},
            "by_op_ms": {k: round(v, r) for k, v in self.by_op.items()},
            "slowest": [[n, o, round(ms, r)] for n, o, ms in self.slowest],
            "other_graphs_ms": round(self.other_ms, r),
        }


def profile(nodes: list[NodeSeen], times_ms: list[float], n_layer: int) -> GraphProfile:
    """Sum one ubatch graph's node times (``times_ms[i]`` for ``nodes[i]``) by part and op."""
    secs = sections(nodes)
    attn = [0.0] * n_layer
    ffn = [0.0] * n_layer
    pro = 0.0
    epi: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for n, s, ms in zip(nodes, secs, times_ms, strict=True):
        by_op[n.op] = by_op.get(n.op, 0.0) + ms
        if s.part == "prologue":
            pro += ms
        elif s.part == "epilogue":
            key = split_layer(n.name)[0] if " (" not in n.name else n.name
            epi[key] = epi.get(key, 0.0) + ms
        elif s.layer is not None and 0 <= s.layer < n_layer:
            (attn if s.part == "attention" else ffn)[s.layer] += ms
    slow = sorted(zip(nodes, times_ms, strict=True), key=lambda x: -x[1])[:10]
    return GraphProfile(
        total_ms=float(sum(times_ms)),
        prologue_ms=pro,
        attention_ms=attn,
        ffn_ms=ffn,
        epilogue=epi,
        by_op=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        slowest=[(n.name, n.op, ms) for n, ms in slow],
    )
