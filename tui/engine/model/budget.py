"""What a context will cost in memory, computed before llama.cpp allocates it.

``llama_init_from_model`` allocates and clears the whole KV cache, touching every byte:
``-c 1048576`` on SmolLM2-135M took 23.3 GB of RSS before the first token. The sizes are known
in advance. The KV cache: ``-c`` rounded up to 256 cells of n_layer x (K row + V row) bytes
(23,040 B for SmolLM2 in f16). The compute buffer, reused node after node: the larger of one
ubatch's logits (n_ubatch x n_vocab floats) and, without flash attention, its scores and mask
against every cell (n_ubatch x n_cells x (n_head + 1) floats); measured for SmolLM2 at -ub 512:
99.38 / 326.38 / 1,286.38 MiB at 4k / 16k / 64k cells with flash attention off (estimate 96 /
320 / 1,280), 98.25 MiB at every size with it on (estimate 96). Then the output buffer and the
mapped model file. The sum is held against MemAvailable (or a lower cgroup limit), less a
tenth kept back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import ggml

CELL_PAD = 256  # llama.cpp rounds the KV cache up to a multiple of 256 cells
HEADROOM = 0.9  # use at most this share of the available memory
MIB = 1 << 20


@dataclass(frozen=True)
class ContextBudget:
    n_ctx: int
    n_cells: int
    kv_bytes: int
    compute_bytes: int
    output_bytes: int
    model_bytes: int
    params: tuple[tuple[str, object], ...] = ()  # what estimate() was given

    @property
    def total(self) -> int:
        return self.kv_bytes + self.compute_bytes + self.output_bytes + self.model_bytes

    def largest_n_ctx(self, available: int) -> int:
        """The largest -c (a multiple of 256) whose estimate fits ``available`` bytes."""
        kw = dict(self.params)
        lo, hi = 0, max(self.n_cells, CELL_PAD) // CELL_PAD * 4
        while lo < hi:  # the total grows with -c, so bisect on multiples of 256
            mid = (lo + hi + 1) // 2
            if estimate(**{**kw, "n_ctx": mid * CELL_PAD}).total <= available:  # type: ignore[arg-type]
                lo = mid
            else:
                hi = mid - 1
        return lo * CELL_PAD


def estimate(
    *,
    n_ctx: int,
    n_ubatch: int,
    n_seq_max: int,
    n_layer: int,
    n_head: int,
    n_vocab: int,
    n_embd_k_gqa: int,
    n_embd_v_gqa: int,
    cache_type_k: str,
    cache_type_v: str,
    flash_attn_on: bool,
    model_bytes: int,
) -> ContextBudget:
    params = tuple(sorted(locals().items()))
    n_cells = -(-n_ctx // CELL_PAD) * CELL_PAD
    kv_cell = n_layer * (
        ggml.row_size(ggml.parse_cache_type(cache_type_k), n_embd_k_gqa)
        + ggml.row_size(ggml.parse_cache_type(cache_type_v), n_embd_v_gqa)
    )
    ub = min(n_ubatch, n_cells)
    scores_cell = 0 if flash_attn_on else ub * (n_head + 1) * 4
    logits = ub * n_vocab * 4
    output = n_seq_max * n_vocab * 4
    return ContextBudget(
        n_ctx=n_ctx,
        n_cells=n_cells,
        kv_bytes=n_cells * kv_cell,
        compute_bytes=max(logits, n_cells * scores_cell),
        output_bytes=output,
        model_bytes=model_bytes,
        params=params,
    )


def available_bytes() -> int | None:
    """Memory this process may still use: MemAvailable, or a lower cgroup v2 limit."""
    avail: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            room = int(limit) - int(used)
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    override = os.environ.get("TOKENSTEP_MEMORY_AVAILABLE")  # for machines that misreport
    if override and override.isdigit():
        avail = int(override)
    return avail


def refusal(budget: ContextBudget, available: int | None) -> str | None:
    """One sentence when the context would not fit, with both figures and the largest -c."""
    if available is None:
        return None
    usable = int(available * HEADROOM)
    if budget.total <= usable:
        return None
    fits = budget.largest_n_ctx(usable)
    hint = f"the largest -c that fits is about {fits:,}" if fits >= 8 else "no -c fits"
    return (
        f"-c {budget.n_ctx:,} would need about {budget.total / MIB:,.0f} MiB "
        f"(KV cache {budget.kv_bytes / MIB:,.0f} MiB, compute {budget.compute_bytes / MIB:,.0f} "
        f"MiB, model {budget.model_bytes / MIB:,.0f} MiB) but {available / MIB:,.0f} MiB are "
        f"available; {hint}."
    )
