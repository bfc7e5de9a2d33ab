"""The graph census: what one ``llama_decode`` computed, from the node names the graph gives.

In the ask phase of ``cb_eval`` (see :mod:`tui.engine.observe.graph_tap`) the scheduler names every
node before running it. The census counts them (all ops, views included), splits them into the
decode's parts (embedding prologue, each layer's attention and feed-forward, the epilogue with
the final norm and lm_head) and keeps each layer's chain of named operations.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_LAYER_NAME = re.compile(r"^(.+)-(\d+)$")


def split_layer(name: str) -> tuple[str, int | None]:
    """``"kq_soft_max-3"`` -> ``("kq_soft_max", 3)``; ``"Kcur-0 (view)"`` -> ``("Kcur", 0)``;
    ``"result_norm"`` -> ``("result_norm", None)``."""
    core = name.split(" (", 1)[0]
    m = _LAYER_NAME.match(core)
    if m is None:
        return core, None
    return m.group(1), int(m.group(2))


@dataclass
class NodeSeen:
    """One node as the ask phase saw it: its graph name and its op (``"kq-3"``, ``MUL_MAT``)."""

    name: str
    op: str


@dataclass
class Section:
    """Where a node sits in the decode: ``prologue`` (embedding), a layer's ``attention`` or
    ``ffn`` part, or the ``epilogue`` (final norm and lm_head)."""

    part: str
    layer: int | None = None


def sections(nodes: list[NodeSeen]) -> list[Section]:
    """Assign every node to a part of the decode, using only the names the graph gives them.

    Nodes before the first layer-suffixed name are the prologue, nodes after the last one the
    epilogue. Inside a layer, unnamed helpers (views, ``node_123``) belong to the layer of the
    named node before them; a layer's attention part runs up to and including ``ffn_inp``
    (the residual add after attention), the rest of the layer is its feed-forward part."""
    layers = [split_layer(n.name)[1] for n in nodes]
    idx = [i for i, lay in enumerate(layers) if lay is not None]
    out: list[Section] = []
    if not idx:
        return [Section("prologue") for _ in nodes]
    first, last = idx[0], idx[-1]
    cur: int | None = None
    part = "attention"
    for i, n in enumerate(nodes):
        if i < first:
            out.append(Section("prologue"))
            continue
        if i > last:
            out.append(Section("epilogue"))
            continue
        base, lay = split_layer(n.name)
        if lay is not None and lay != cur:
            cur, part = lay, "attention"
        out.append(Section(part, cur))
        if base == "ffn_inp":
            part = "ffn"
    return out


@dataclass
class GraphCensus:
    """What one ``llama_decode`` computed: node count and the named chain of each layer."""

    n_nodes: int  # nodes in the graph of the first ubatch (all ops, views included)
    n_graphs: int  # graphs run by this decode: one per ubatch
    n_layers: int
    ops: dict[str, int]  # op -> how many nodes
    prologue: list[str]  # "name:OP" before the first layer
    layer_chain: list[str]  # named ops of layer 0, suffix dropped, views left out
    same_chain_every_layer: bool
    nodes_per_layer: list[int]
    epilogue: list[str]
    layer_nodes: list[str] = field(default_factory=list)  # every node of layer 0, "name:OP"
    # Nodes of graphs run before the ubatch graphs in the same llama_decode (the K shift that
    # re-rotates cached keys after a context shift), by op.
    pre_graph_ops: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_nodes": self.n_nodes,
            "n_graphs": self.n_graphs,
            "n_layers": self.n_layers,
            "prologue": self.prologue,
            "layer_chain": self.layer_chain,
            "same_chain_every_layer": self.same_chain_every_layer,
            "nodes_per_layer": self.nodes_per_layer,
            "epilogue": self.epilogue,
            "ops": self.ops,
            **(
                {
                    "pre_graph_nodes": sum(self.pre_graph_ops.values()),
                    "pre_graph_ops": self.pre_graph_ops,
                }
                if self.pre_graph_ops
                else {}
            ),
        }


def _chain(nodes: list[NodeSeen]) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if " (" in n.name:  # views, permutes and reshapes ggml named after their source
            continue
        base, layer = split_layer(n.name)
        if layer is None:  # helpers such as node_1073 (llama.cpp gave them no name)
            continue
        if not out or out[-1] != base:
            out.append(base)
    return out


def census(
    nodes: list[NodeSeen], n_graphs: int = 1, pre: list[NodeSeen] | None = None
) -> GraphCensus:
    """Describe one ubatch graph (``nodes``); ``pre`` are nodes of other graphs run first."""
    secs = sections(nodes)
    by_layer: dict[int, list[NodeSeen]] = {}
    for n, s in zip(nodes, secs, strict=True):
        if s.layer is not None:
            by_layer.setdefault(s.layer, []).append(n)
    chains = [_chain(by_layer[k]) for k in sorted(by_layer)]
    first = by_layer[min(by_layer)] if by_layer else []
    return GraphCensus(
        n_nodes=len(nodes),
        n_graphs=n_graphs,
        n_layers=len(by_layer),
        ops=dict(Counter(n.op for n in nodes).most_common()),
        prologue=[
            f"{n.name}:{n.op}" for n, s in zip(nodes, secs, strict=True) if s.part == "prologue"
        ],
        layer_chain=chains[0] if chains else [],
        same_chain_every_layer=all(c == chains[0] for c in chains),
        nodes_per_layer=[len(by_layer[k]) for k in sorted(by_layer)],
        epilogue=[
            f"{n.name}:{n.op}" for n, s in zip(nodes, secs, strict=True) if s.part == "epilogue"
        ],
        layer_nodes=[f"{n.name}:{n.op}" for n in first],
        pre_graph_ops=dict(Counter(n.op for n in pre or []).most_common()),
    )
