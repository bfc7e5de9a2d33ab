"""The logit lens: what each layer would predict if the model stopped there.

The residual after layer N (``l_out-N``) is projected as the head projects the last one: the
output norm (``result_norm``: RMS with ``output_norm.weight`` and the epsilon; LayerNorm when it
has a bias), ``output.weight`` (or tied ``token_embd.weight``), then the final soft-cap or
logit scale. The last layer then equals llama.cpp's logits up to rounding: the head is read
dequantized to float32, while llama.cpp multiplies it quantized with quantized activations.
For a Q8_0 head each element moves by at most half its block's scale, so logit t moves by at
most the sum over blocks of that half-step times the block's sum of |w_t|
(``rounding_bound``). SmolLM2's Q8_0 head, "The capital of France is": max |Δ| 0.21 to 0.27 on
AVX2 (0.43 over the tests' prompts), under bounds of 2.8 to 3.3. The weights are read once per
file with ``gguf`` and kept as float32; all layers cost n_layer × n_vocab × n_embd
multiply-adds, so it runs only while the lens is on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .tokens import display_bytes

if TYPE_CHECKING:
    from .gguf_header import GGUFHeader
    from .tokens import Vocab

LENS_TOP = 5
# The weight types whose matrix products llama.cpp's CPU backend runs on activations rounded
# to 8 bits (ggml's vec_dot_type), with the block size the rounding works in: Q8_0 and Q8_1
# blocks of 32 for the legacy quants, Q8_K blocks of 256 for the k-quants.
ACTIVATION_BLOCK = {
    "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32,
    "Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
}  # fmt: skip
# Architectures whose final logits llama.cpp divides by ``logit_scale`` (the others with that
# key multiply by it, as Command-R does).
DIVIDE_BY_LOGIT_SCALE = ("granite", "granitemoe", "granitehybrid")


@dataclass(frozen=True, eq=False)
class LensHead:
    """The model's head, as float32 arrays: project a hidden state to logits."""

    arch: str
    eps: float
    norm: np.ndarray  # output_norm.weight, (n_embd,)
    norm_bias: np.ndarray | None  # output_norm.bias: the output norm is a LayerNorm
    out: np.ndarray  # (n_vocab, n_embd)
    out_bias: np.ndarray | None
    out_name: str  # "output.weight" or "token_embd.weight" (tied)
    softcap: float | None  # final_logit_softcapping
    logit_scale: float | None  # multiplier applied to the final logits
    # Per vocabulary row, the sum of |w| over each block the activations are quantized in
    # (n_vocab, n_embd / block), and that block's size and step; None where the head's type
    # is not one whose activation rounding is bounded here.
    block_abs: np.ndarray | None = None
    act_block: int = 0

    def project(self, hidden: np.ndarray) -> np.ndarray:
        """(k, n_embd) hidden states -> (k, n_vocab) logits, float32."""
        h = np.asarray(hidden, dtype=np.float32).reshape(-1, self.norm.shape[0])
        if self.norm_bias is not None:
            h = h - h.mean(axis=1, keepdims=True)
            var = (h * h).mean(axis=1, keepdims=True)
            h = h / np.sqrt(var + self.eps) * self.norm + self.norm_bias
        else:
            ms = (h.astype(np.float64) ** 2).mean(axis=1, keepdims=True)
            h = (h / np.sqrt(ms + self.eps)).astype(np.float32) * self.norm
        logits = h @ self.out.T
        if self.out_bias is not None:
            logits += self.out_bias
        if self.logit_scale is not None:
            logits *= np.float32(self.logit_scale)
        if self.softcap:
            cap = np.float32(self.softcap)
            logits = np.tanh(logits / cap) * cap
        return logits

    def rounding_bound(self, hidden: np.ndarray) -> float | None:
        """How far llama.cpp's logits for the last row of ``hidden`` can lie from
        :meth:`project`'s: the activations' rounding to 8 bits (half a step of each block's
        scale, max |x| / 127) times each block's sum of |w|, over the worst vocabulary row,
        plus float32's own slack. Soft-capping only shrinks differences; a scale scales them."""
        if self.block_abs is None or self.norm_bias is not None:
            return None
        h = np.asarray(hidden, dtype=np.float64).reshape(-1, self.norm.shape[0])[-1]
        x = h / np.sqrt(np.mean(h * h) + self.eps) * self.norm.astype(np.float64)
        half = np.abs(x).reshape(-1, self.act_block).max(axis=1) / 127.0 / 2.0
        per_row = self.block_abs @ half.astype(np.float32)
        bound = float(per_row.max()) * abs(self.logit_scale or 1.0)
        return bound + 1e-3 + 1e-5 * float(np.abs(x).sum())

    def describe(self) -> str:
        norm = "LayerNorm" if self.norm_bias is not None else "RMS norm"
        parts = [f"{norm} (eps {self.eps:g})", self.out_name + (" (tied)" if self.tied else "")]
        if self.logit_scale is not None:
            parts.append(f"x {self.logit_scale:g}")
        if self.softcap:
            parts.append(f"soft-cap {self.softcap:g}")
        return " · ".join(parts)

    @property
    def tied(self) -> bool:
        return self.out_name == "token_embd.weight"


def head_problem(header: GGUFHeader) -> str | None:
    """Why the lens cannot project this model's hidden states (None: it can)."""
    names = {t.name for t in header.tensors}
    if "output_norm.weight" not in names:
        return "the lens needs output_norm.weight; this model has none"
    if "output.weight" not in names and "token_embd.weight" not in names:
        return "the lens needs output.weight or token_embd.weight; this model has neither"
    return None


HEAD_CHUNK = 4 << 20  # the head's matrix is read and dequantized about this many bytes at a time


def load_head(path: str, progress: Callable[[int, int], None] | None = None) -> LensHead:
    """Read and dequantize the head's weights. Each call reads the file; the caller owns the
    result (in the app the worker's observers, so the head goes when the worker stops). The
    metadata and the tensor table come from :func:`~tui.engine.model.gguf_header.read_header`
    (0.05 s on SmolLM2, where ``gguf.GGUFReader`` parsed every vocabulary entry first: 12.6 s
    under a load of 6); the matrix is mapped and dequantized in chunks of :data:`HEAD_CHUNK`
    bytes, each chunk reported to ``progress`` as (bytes done, bytes in all)."""
    import gguf

    from .gguf_header import read_header

    hdr = read_header(path)
    tensors = {t.name: t for t in hdr.tensors}

    def array(name: str, report: bool = False) -> np.ndarray | None:
        t = tensors.get(name)
        if t is None:
            return None
        qtype = gguf.GGMLQuantizationType(t.ggml_type)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_per_row = t.shape[0]
        n_rows = math.prod(t.shape[1:])
        row_bytes = n_per_row // block * size
        raw = np.memmap(path, np.uint8, "r", hdr.data_offset + t.offset, (n_rows, row_bytes))
        out = np.empty((n_rows, n_per_row), np.float32)
        step = max(1, HEAD_CHUNK // row_bytes)
        total = n_rows * row_bytes
        for i in range(0, n_rows, step):
            out[i : i + step] = gguf.quants.dequantize(np.asarray(raw[i : i + step]), qtype)
            if report and progress is not None:
                progress(min(i + step, n_rows) * row_bytes, total)
        del raw
        return out

    arch = hdr.arch
    norm_bias = array("output_norm.bias")
    if norm_bias is not None:
        eps = hdr.get(f"{arch}.attention.layer_norm_epsilon")
    else:
        eps = hdr.get(f"{arch}.attention.layer_norm_rms_epsilon")
    out_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    norm, out = array("output_norm.weight"), array(out_name, report=True)
    if norm is None or out is None:
        raise ValueError("the model has no output norm or output matrix")
    scale = hdr.get(f"{arch}.logit_scale")
    if scale is not None:
        scale = 1.0 / float(scale) if arch in DIVIDE_BY_LOGIT_SCALE else float(scale)
    cap = hdr.get(f"{arch}.final_logit_softcapping")
    qname = gguf.GGMLQuantizationType(tensors[out_name].ggml_type).name
    act_block = ACTIVATION_BLOCK.get(qname, 0)
    block_abs = None
    if act_block and out.size % act_block == 0:
        rows = np.abs(out.reshape(-1, norm.size))
        block_abs = rows.reshape(rows.shape[0], -1, act_block).sum(axis=2, dtype=np.float32)
    return LensHead(
        arch=arch,
        eps=float(eps if eps is not None else 1e-5),
        norm=norm.reshape(-1),
        norm_bias=norm_bias.reshape(-1) if norm_bias is not None else None,
        out=out.reshape(-1, norm.size),
        out_bias=(b.reshape(-1) if (b := array("output.bias")) is not None else None),
        out_name=out_name,
        softcap=float(cap) if cap else None,
        logit_scale=scale,
        block_abs=block_abs,
        act_block=act_block,
    )


def layer_logits(head: LensHead, rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """(n_layer, n_embd) rows of ``l_out`` -> (n_layer, n_vocab) lens logits."""
    return head.project(rows)[:, :n_vocab]


def token_ranks(logits: np.ndarray, token: int) -> tuple[list[int], list[float]]:
    """Per layer the 0-based rank of ``token`` (how many tokens have a higher logit: 0 is the
    layer's top-1) and its p at temperature 1."""
    m = logits.max(axis=1, keepdims=True)
    z = np.exp(logits - m, dtype=np.float32).sum(axis=1, dtype=np.float64)
    own = logits[:, token]
    rank = (logits > own[:, None]).sum(axis=1)
    p = np.exp(own.astype(np.float64) - m[:, 0].astype(np.float64)) / z
    return [int(r) for r in rank], [float(x) for x in p]


def first_layers(ranks: list[int]) -> tuple[int | None, int | None]:
    """The first layer where a rank is 0 (the top-1) and the first where it is under 5."""
    first1 = next((i for i, r in enumerate(ranks) if r == 0), None)
    first5 = next((i for i, r in enumerate(ranks) if r < LENS_TOP), None)
    return first1, first5


def lens_figures(
    head: LensHead,
    rows: np.ndarray,
    final: np.ndarray,
    vocab: Vocab,
    k: int = LENS_TOP,
) -> tuple[list[dict[str, Any]], dict[str, Any], np.ndarray]:
    """Per layer the top ``k`` (id, piece, logit, p at temperature 1) and the 0-based rank and
    p of llama.cpp's own top-1 (``top1_rank``, ``top1_p``); the summary: that token
    (``top1``), the layers where it first enters the top-1 and the top-5, and the last
    layer's max |Δ| against ``final`` (llama.cpp's logits) over the vocabulary; and the lens
    logits themselves (for the sampled token's ranks once it is known, :func:`pick_figures`)."""
    n_vocab = min(head.out.shape[0], final.shape[0])
    logits = layer_logits(head, rows, n_vocab)
    final = final[:n_vocab]
    top1 = int(np.argmax(final))
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    m = logits.max(axis=1, keepdims=True)
    z = np.exp(logits - m, dtype=np.float32).sum(axis=1, dtype=np.float64)
    rank, p_top1 = token_ranks(logits, top1)
    layers: list[dict[str, Any]] = []
    piece = vocab.piece
    for i in range(logits.shape[0]):
        ids = sorted(top[i].tolist(), key=lambda t: -float(logits[i, t]))
        p = np.exp(logits[i, ids].astype(np.float64) - float(m[i, 0])) / z[i]
        layers.append(
            {
                "layer": i,
                "top": [
                    {
                        "id": t,
                        "piece": display_bytes(piece(t)),
                        "logit": round(float(logits[i, t]), 5),
                        "p": round(float(pt), 6),
                    }
                    for t, pt in zip(ids, p.tolist(), strict=True)
                ],
                "top1_rank": rank[i],
                "top1_p": round(p_top1[i], 6),
            }
        )
    first1, first5 = first_layers(rank)
    summary = {
        "top1": {"id": top1, "piece": display_bytes(piece(top1))},
        "top1_layer": first1,
        "top5_layer": first5,
        "ranks": "0-based: rank 0 is a layer's own top-1",
        "max_abs_diff": round(float(np.abs(logits[-1] - final).max()), 5),
        "head": head.describe(),
    }
    bound = head.rounding_bound(rows[-1])
    if bound is not None:  # what the activations' 8-bit rounding alone can move a logit by
        summary["rounding_bound"] = round(bound, 5)
    return layers, summary, logits


def pick_figures(
    logits: np.ndarray,
    layers: list[dict[str, Any]],
    summary: dict[str, Any],
    token: int,
    piece: str,
    *,
    forced: bool,
) -> None:
    """Add the token generated from these logits (sampled, or forced) to a lens: per layer
    its 0-based rank and p (``pick_rank``, ``pick_p``), and in the summary the token
    (``pick``) and the layers where it first enters the top-1 and the top-5."""
    rank, p = token_ranks(logits, token)
    for entry, r, pt in zip(layers, rank, p, strict=True):
        entry["pick_rank"] = r
        entry["pick_p"] = round(pt, 6)
    first1, first5 = first_layers(rank)
    summary["pick"] = {"id": token, "piece": piece, "forced": forced}
    summary["pick_top1_layer"] = first1
    summary["pick_top5_layer"] = first5
