"""Model facts and KV-cache sizes read from the GGUF header alone (no weights loaded), and
what this llama.cpp was built with (its system info, and the extra-buffer choice it implies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ggml, repack
from .gguf_header import GGUFHeader
from .model import system_info

CALC_TYPES = ("f16", "q8_0", "q4_0")


@dataclass
class HeaderFacts:
    arch: str
    name: str
    file_type: str
    n_params_hint: str
    n_vocab: int
    n_layer: int
    n_head: int
    n_head_kv: list[int]  # per layer (llama.cpp allows it to vary)
    n_embd: int
    head_dim_k: int
    head_dim_v: int
    n_ff: Any
    n_ctx_train: int
    sliding_window: int
    chat_template: str | None

    def kv_bytes_per_token(self, type_k: str = "f16", type_v: str = "f16") -> int:
        tk, tv = ggml.GGML_TYPES[type_k], ggml.GGML_TYPES[type_v]
        return sum(
            ggml.row_size(tk, h * self.head_dim_k) + ggml.row_size(tv, h * self.head_dim_v)
            for h in self.n_head_kv
        )


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, list):
        return int(v[0]) if v else default
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def facts(hdr: GGUFHeader) -> HeaderFacts:
    n_layer = _int(hdr.arch_get("block_count"))
    n_head = _int(hdr.arch_get("attention.head_count"))
    raw_kv = hdr.arch_get("attention.head_count_kv", n_head)
    n_head_kv = (
        [_int(x) for x in raw_kv] if isinstance(raw_kv, list) else [_int(raw_kv, n_head)] * n_layer
    )
    n_embd = _int(hdr.arch_get("embedding_length"))
    head_k = _int(hdr.arch_get("attention.key_length"), n_embd // max(n_head, 1))
    head_v = _int(hdr.arch_get("attention.value_length"), head_k)
    n_vocab = hdr.array_lengths.get("tokenizer.ggml.tokens", 0)
    tmpl = hdr.get("tokenizer.chat_template")
    return HeaderFacts(
        arch=hdr.arch,
        name=str(hdr.get("general.name", hdr.path.stem)),
        file_type=str(hdr.get("general.file_type", "?")),
        n_params_hint=str(hdr.get("general.size_label", "")),
        n_vocab=int(n_vocab),
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_embd=n_embd,
        head_dim_k=head_k,
        head_dim_v=head_v,
        n_ff=hdr.arch_get("feed_forward_length", 0),
        n_ctx_train=_int(hdr.arch_get("context_length")),
        sliding_window=_int(hdr.arch_get("attention.sliding_window")),
        chat_template=tmpl if isinstance(tmpl, str) else None,
    )


# llama.cpp's sliding-window layer pattern per architecture when the file does not state one
# (load_swa_pattern(ml, N) in llama.cpp's src/models/<arch>.cpp): in every group of N layers
# the last one is global, the others use the window.
SWA_PATTERN_DEFAULT = {
    "gemma2": 2,
    "gemma3": 6,
    "gemma3n": 5,
    "gemma-embedding": 6,
    "cohere2": 4,
    "exaone4": 4,
    "olmo2": 4,
    "gpt-oss": 2,
}
_PAD = 256  # llama.cpp pads the SWA cache to a multiple of 256 cells


@dataclass
class CachePlan:
    """One KV cache as llama.cpp would allocate it for a header's model (tools' defaults)."""

    kind: str  # "kv", "non-SWA" or "SWA"
    cells: int
    layers: list[int]
    bytes: dict[str, int]  # cache type (K and V alike) -> bytes


def swa_layers(hdr: GGUFHeader, f: HeaderFacts) -> list[bool] | None:
    """Which layers use the sliding window; None when the model has none, or when neither
    the file nor llama.cpp's per-architecture default says which."""
    if f.sliding_window <= 0:
        return None
    raw = hdr.arch_get("attention.sliding_window_pattern")
    if isinstance(raw, list) and len(raw) == f.n_layer:
        return [bool(x) for x in raw]
    n = _int(raw) if raw is not None else SWA_PATTERN_DEFAULT.get(f.arch, -1)
    if n < 0:
        return None
    return [n == 0 or (il % n < n - 1) for il in range(f.n_layer)]


def cache_plan(
    hdr: GGUFHeader,
    f: HeaderFacts,
    n_ctx: int,
    n_ubatch: int = 512,
    n_seq: int = 1,
    *,
    swa_full: bool = False,
) -> list[CachePlan]:
    """The caches llama.cpp allocates for ``n_ctx``: one for a plain model; for a model with
    sliding-window layers, a full-size one for the global layers and one for the window
    layers. With ``swa_full`` off (llama.cpp's tools' default) that one is window-sized
    (n_swa x n_seq + n_ubatch, padded to 256, at most n_ctx); with it on (what tokenstep
    creates, so rewind and prefix reuse keep working) it holds the whole context too."""
    swa = swa_layers(hdr, f)

    def plan(kind: str, cells: int, layers: list[int]) -> CachePlan:
        per = {
            t: sum(
                ggml.row_size(ggml.GGML_TYPES[t], f.n_head_kv[i] * f.head_dim_k)
                + ggml.row_size(ggml.GGML_TYPES[t], f.n_head_kv[i] * f.head_dim_v)
                for i in layers
            )
            for t in CALC_TYPES
        }
        return CachePlan(kind, cells, layers, {t: b * cells for t, b in per.items()})

    n_ctx_cells = -(-n_ctx // _PAD) * _PAD
    if not swa or all(swa):
        return [plan("kv", n_ctx_cells, list(range(f.n_layer)))]
    n_swa_cells = min(n_ctx_cells, -(-(f.sliding_window * n_seq + n_ubatch) // _PAD) * _PAD)
    if swa_full:
        n_swa_cells = n_ctx_cells
    return [
        plan("non-SWA", n_ctx_cells, [i for i, s in enumerate(swa) if not s]),
        plan("SWA", n_swa_cells, [i for i, s in enumerate(swa) if s]),
    ]


def build_facts(repack_flag: bool | None = None) -> dict[str, Any]:
    """llama.cpp's system info line and the extra-buffer choice a model load would make with
    ``--repack``/``--no-repack`` (``repack_flag``), for ``info`` and bug reports."""
    line = system_info()
    choice = repack.decide(line, flag=repack_flag)
    return {
        "system_info": line,
        "repack": {"use_extra_bufts": choice.use_extra_bufts, "reason": choice.reason},
    }
