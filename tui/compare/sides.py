"""The two sides as flags: what B may change (in llama.cpp's spelling), which of those change
the logits (the rest are the sampler's), and the short names the output gives each side."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..engine import EngineConfig

# What B may change, with the flag that names it (in llama.cpp's spelling).
SIDE_FLAGS = {
    "model": "-m",
    "ctx_size": "-c",
    "batch_size": "-b",
    "ubatch_size": "-ub",
    "threads": "-t",
    "flash_attn": "-fa",
    "cache_type_k": "-ctk",
    "cache_type_v": "-ctv",
    "repack": "--repack",
    "swa_full": "--swa-full",
    "temp": "--temp",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "min_p": "--min-p",
    "seed": "-s",
    "greedy": "--greedy",
    "server": "--server",
    "n_probs": "--n-probs",
}
LOGIT_FLAGS = {"model", "ctx_size", "batch_size", "ubatch_size", "threads", "flash_attn"}
LOGIT_FLAGS |= {"cache_type_k", "cache_type_v", "repack", "swa_full", "server", "n_probs"}


def _kv_label(cfg: EngineConfig) -> str:
    k, v = cfg.cache_type_k, cfg.cache_type_v
    return f"{k} KV" if k == v else f"{k}/{v} KV"


def labels(
    a: argparse.Namespace,
    b: argparse.Namespace,
    ca: EngineConfig,
    cb: EngineConfig,
    quant: Callable[[str | None], str],
    *,
    same_fa: bool = False,
) -> tuple[str, str]:
    """Short names for the two sides, from what B changes: "f16 KV"/"q4_0 KV", the weights'
    type, or the flags themselves."""
    parts_a: list[str] = []
    parts_b: list[str] = []
    if (ca.cache_type_k, ca.cache_type_v) != (cb.cache_type_k, cb.cache_type_v):
        parts_a.append(_kv_label(ca))
        parts_b.append(_kv_label(cb))
    if a.model != b.model:
        qa, qb = quant(a.model), quant(b.model)
        parts_a.append(f"{qa} weights" if qa != qb else os.path.basename(a.model or "bundled"))
        parts_b.append(f"{qb} weights" if qa != qb else os.path.basename(b.model or ""))
    if b.server:
        parts_a.append("local")
        parts_b.append(f"llama-server {b.server}")
    for d, flag in SIDE_FLAGS.items():
        if d in ("cache_type_k", "cache_type_v", "model", "server", "n_probs") or getattr(
            a, d
        ) == getattr(b, d):
            continue
        if d == "flash_attn" and same_fa:  # -fa auto that llama.cpp turned on, against on
            continue
        parts_a.append(f"{flag} {getattr(a, d)}")
        parts_b.append(f"{flag} {getattr(b, d)}")
    if not parts_b:
        return "A", "B: same as A"
    return "A: " + ", ".join(parts_a), "B: " + ", ".join(parts_b)
