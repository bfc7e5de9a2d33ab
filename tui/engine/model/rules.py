"""llama.cpp's rules that several parts of tokenstep must agree on, written once.

Each rule here is llama.cpp's own (the file and check are named), so a flag check in the CLI,
the engine's config validation, the attention rebuild and the memory pane all refuse or
explain the same thing in the same words.
"""

from __future__ import annotations

# ggml types that are not block-quantized (``ggml_is_quantized`` is false for them).
UNQUANTIZED_CACHE_TYPES = frozenset({"f32", "f16", "bf16"})

QUANTIZED_V_NOTE = (
    "a quantized V cache needs flash attention: without it llama.cpp stores V transposed, "
    "one value per token in each row, which cannot be packed into quantization blocks; "
    "use -fa on (or auto, which llama.cpp then turns on)."
)


def v_cache_is_quantized(cache_type_v: str) -> bool:
    """True for a V cache type that llama.cpp block-quantizes (q8_0, q4_0, ...)."""
    return cache_type_v not in UNQUANTIZED_CACHE_TYPES


def v_cache_needs_flash_attn(cache_type_v: str) -> bool:
    """llama_init_from_model refuses a quantized V cache with flash attention disabled
    (llama-context.cpp: "V cache quantization requires flash_attn")."""
    return v_cache_is_quantized(cache_type_v)


def attention_capture_conflict(cache_type_v: str, flash_attn: str = "off") -> str | None:
    """Why the attention capture cannot run with these settings, or None.

    The capture reads the ``kq_soft_max`` node, which exists only with flash attention off
    (flash attention fuses the softmax away), and a quantized V cache needs it on."""
    if flash_attn == "on":
        return (
            "attention capture needs flash attention off (it fuses the softmax away); drop -fa on."
        )
    if v_cache_needs_flash_attn(cache_type_v):
        return (
            f"attention capture needs flash attention off, and a {cache_type_v} V cache "
            "needs it on; use -ctv f16."
        )
    return None


def batch_holds_sequences(n_batch: int, n_seq_max: int) -> str | None:
    """Why llama.cpp would abort on this ``n_batch``, or None.

    llama.cpp sizes the output buffer for ``n_batch`` rows, and reserving the worst-case graph
    asks for one output row per sequence; with ``n_batch < n_seq_max`` it fails
    ``GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)`` inside ``llama_init_from_model``
    and kills the process (seen here: -b 1 with 2 sequences, -b 3 with 4; -b 2 -ub 1 works)."""
    if n_batch >= n_seq_max:
        return None
    return (
        f"-b/--batch-size must be at least {n_seq_max}: this context holds {n_seq_max} "
        "sequences (one to fork), and llama.cpp needs a batch row for each of them."
    )
