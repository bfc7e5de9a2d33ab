"""llama-cpp-python's own ``Llama`` as the outside oracle."""

from __future__ import annotations

from pathlib import Path


def logits_oracle(model_path: Path, n_ctx: int = 512, *, flash_attn: bool = False):
    """llama-cpp-python's own ``Llama`` keeping every row's logits (``logits_all``): the
    outside oracle for per-position figures. The caller closes it."""
    from llama_cpp import Llama

    return Llama(
        model_path=str(model_path),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_threads=2,
        logits_all=True,
        flash_attn=flash_attn,
        verbose=False,
    )
