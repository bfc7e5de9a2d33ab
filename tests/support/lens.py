"""The logit lens's NumPy oracle: the GGUF head read once per test file."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pytest

from tui.engine.run.backend import LOCAL_LENS
from tui.worker.lens import LensStep, LensView, first_layers

MIDDLE = 15


class _Head(NamedTuple):
    eps: float
    norm: np.ndarray  # output_norm.weight, float64
    w: np.ndarray  # the head matrix (n_vocab, n_embd) dequantized, float64
    abs_blocks: np.ndarray  # per token and block of 32, the sum of |w| (float32)


@functools.lru_cache(maxsize=2)
def head_arrays(path: Path) -> _Head:
    """The head read from the GGUF file with the ``gguf`` package, once per file: parsing the
    file's metadata (49,152 vocabulary strings) and dequantizing 28M weights takes 5 to 30 s
    on a 2-core machine, and :func:`q8_bound` and :func:`_numpy_head` need it every token.
    Q8_0 values (an f16 scale times an int8) are exact in float32, so float64 loses nothing."""
    import gguf

    r = gguf.GGUFReader(str(path))
    t = {x.name: x for x in r.tensors}
    arch = r.fields["general.architecture"].contents()
    eps = float(r.fields[f"{arch}.attention.layer_norm_rms_epsilon"].contents())
    norm = gguf.quants.dequantize(t["output_norm.weight"].data, t["output_norm.weight"].tensor_type)
    mat = t.get("output.weight") or t["token_embd.weight"]
    w32 = gguf.quants.dequantize(mat.data, mat.tensor_type).astype(np.float32)
    abs_blocks = np.abs(w32).reshape(w32.shape[0], -1, 32).sum(axis=2)  # sum of |w| per block
    return _Head(eps, norm.reshape(-1).astype(np.float64), w32.astype(np.float64), abs_blocks)


@pytest.fixture(scope="module", autouse=True)
def forget_heads():
    """The cached heads (SmolLM2's is 226 MB in float64) live as long as this module's tests."""
    yield
    head_arrays.cache_clear()


def numpy_head(path: Path, hidden: np.ndarray, softcap: float | None) -> np.ndarray:
    """The head written out in float64: RMS norm, output_norm, the tied embedding matrix."""
    head = head_arrays(path)
    h = hidden.astype(np.float64)
    x = h / np.sqrt(np.mean(h * h) + head.eps) * head.norm
    logits = head.w.reshape(-1, h.size) @ x
    if softcap:
        logits = np.tanh(logits / softcap) * softcap
    return logits


PARIS = 7042


NBSP = 11  # id of the U+00A0 piece in the hand-made deep layers


def deep_view(n_layer: int = 30, enters: int = 28) -> Any:
    """Widget-test data only: 30 layers; layer 0's second candidate is a U+00A0 piece, and
    ' Paris' enters the top 5 at ``enters`` and is the top-1 at the last layer."""
    layers = []
    for i in range(n_layer):
        top = [(12, " the"), (NBSP, "\u00a0"), (13, " so"), (14, "."), (15, " not")]
        if i >= enters:
            top[2] = (PARIS, " Paris")
        if i == n_layer - 1:
            top[0], top[2] = top[2], top[0]
        layers.append(
            {
                "layer": i,
                "top": [
                    {"id": t, "piece": p, "logit": 10.0 - j, "p": [0.45, 0.26, 0.12, 0.11, 0.02][j]}
                    for j, (t, p) in enumerate(top)
                ],
            }
        )
    first1, first5 = first_layers(layers, PARIS)
    check = {"max_abs_diff": 0.23245, "head": "RMS norm", "ms": 80}
    step = LensStep(9, 4, layers, check, PARIS, " Paris", "llama.cpp's top-1", first1, first5)
    return SimpleNamespace(capabilities=LOCAL_LENS, lens=LensView(True, "preview", step, 30, ""))
