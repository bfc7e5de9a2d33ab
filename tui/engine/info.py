"""Model facts and KV-cache sizes read from the GGUF header alone (no weights loaded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ggml
from .gguf_header import GGUFHeader

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
