"""A tiny Gemma-2-shaped GGUF with random weights, written for the tests.

Gemma 2 alternates sliding-window and global attention layers, so llama.cpp gives it two KV
caches. No such model ships with the project, so the tests write one (a few hundred KB): its
weights are noise, but llama.cpp loads it, allocates and logs its caches like any Gemma 2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_LAYER = 4  # llama.cpp's Gemma 2 pattern: even layers use the sliding window, odd ones do not
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
N_FF = 128
N_CTX_TRAIN = 2048
N_SWA = 128


def write_swa_model(path: Path, *, output_norm: float = 1.0) -> Path:
    """``output_norm`` scales the output norm's weight: large values give final logits big
    enough for the soft-cap (30) to bend them."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "gemma2")
    w.add_name("tiny-swa-test")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(N_SWA)
    w.add_attn_logit_softcapping(50.0)
    w.add_final_logit_softcapping(30.0)
    # a byte-level SentencePiece vocabulary: <unk> <s> </s> and the 256 byte tokens
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control, control, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    n_vocab = len(tokens)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    w.add_tensor("output_norm.weight", np.full(N_EMBD, output_norm, dtype=np.float32))
    for i in range(N_LAYER):
        ones(f"blk.{i}.attn_norm.weight")
        t(f"blk.{i}.attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
        ones(f"blk.{i}.post_attention_norm.weight")
        ones(f"blk.{i}.ffn_norm.weight")
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
        ones(f"blk.{i}.post_ffw_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
