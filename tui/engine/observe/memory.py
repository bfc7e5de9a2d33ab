"""What the KV cache costs in memory, taken apart.

Per token and layer the cache stores one K row and one V row. Each row has n_head_kv x
head_dim values, and ggml sizes it for the cache type (``ggml_row_size``: a q8_0 block of 32
values takes 34 bytes, q4_0 takes 18). With grouped-query attention several query heads share
one K/V head, so the cache is n_head / n_head_kv times smaller than full multi-head attention.

Every figure is arithmetic on the model's own hyper-parameters and ggml's type sizes; the
allocation is compared with what llama.cpp logged when it made the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model import ggml
from ..model.rules import QUANTIZED_V_NOTE, v_cache_is_quantized

if TYPE_CHECKING:
    from ..run.backend import LocalSession

CALC_TYPES = ("f16", "q8_0", "q4_0")
MIB = 1 << 20


@dataclass
class KVBreakdown:
    """Bytes of KV cache per token: n_layer x (K row + V row)."""

    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    type_k: str = "f16"
    type_v: str = "f16"

    def _row(self, ggml_type: str, n_heads: int, head_dim: int) -> int:
        return ggml.row_size(ggml.GGML_TYPES[ggml_type], n_heads * head_dim)

    @property
    def k_row_bytes(self) -> int:
        """One layer's K for one token: n_head_kv x head_dim values of type_k."""
        return self._row(self.type_k, self.n_head_kv, self.head_dim_k)

    @property
    def v_row_bytes(self) -> int:
        return self._row(self.type_v, self.n_head_kv, self.head_dim_v)

    @property
    def bytes_per_token(self) -> int:
        return self.n_layer * (self.k_row_bytes + self.v_row_bytes)

    @property
    def mha_bytes_per_token(self) -> int:
        """The same cache if every query head had its own K/V head (no GQA)."""
        return self.n_layer * (
            self._row(self.type_k, self.n_head, self.head_dim_k)
            + self._row(self.type_v, self.n_head, self.head_dim_v)
        )

    @property
    def gqa_factor(self) -> float:
        """How many times smaller GQA makes the cache (n_head / n_head_kv for equal types)."""
        return self.mha_bytes_per_token / self.bytes_per_token if self.bytes_per_token else 0.0

    @property
    def gqa_saved_per_token(self) -> int:
        return self.mha_bytes_per_token - self.bytes_per_token

    def formula(self) -> str:
        return (
            f"{self.n_layer} layers × (K {self.n_head_kv}×{self.head_dim_k} {self.type_k} "
            f"= {self.k_row_bytes:,} B + V {self.n_head_kv}×{self.head_dim_v} {self.type_v} "
            f"= {self.v_row_bytes:,} B) = {self.bytes_per_token:,} B per token"
        )

    def with_types(self, type_k: str, type_v: str) -> KVBreakdown:
        return KVBreakdown(
            self.n_layer,
            self.n_head,
            self.n_head_kv,
            self.head_dim_k,
            self.head_dim_v,
            type_k,
            type_v,
        )


def breakdown_for(engine: LocalSession) -> KVBreakdown:
    i = engine.info
    return KVBreakdown(
        i.n_layer,
        i.n_head,
        i.n_head_kv,
        i.head_dim_k,
        i.head_dim_v,
        ggml.GGML_TYPE_NAMES[engine.type_k],
        ggml.GGML_TYPE_NAMES[engine.type_v],
    )


def context_sizes(n_ctx_train: int, start: int = 1024) -> list[int]:
    """1k, 2k, 4k ... up to the model's training context (which is always the last row)."""
    out = []
    n = start
    while n < n_ctx_train:
        out.append(n)
        n *= 2
    if n_ctx_train > 0:
        out.append(n_ctx_train)
    return out


@dataclass
class CalcRow:
    n_ctx: int
    bytes: dict[str, int]  # cache type (K and V alike) -> bytes for n_ctx tokens


def calculator(
    bd: KVBreakdown, n_ctx_train: int, types: tuple[str, ...] = CALC_TYPES
) -> list[CalcRow]:
    per = {t: bd.with_types(t, t).bytes_per_token for t in types}
    return [CalcRow(n, {t: per[t] * n for t in types}) for n in context_sizes(n_ctx_train)]


@dataclass
class CacheAlloc:
    """One cache as llama.cpp allocated it (a sliding-window model has two)."""

    kind: str  # "kv", or "non-SWA" / "SWA"
    cells: int
    layers: int
    type_k: str
    type_v: str
    logged_mib: float  # llama.cpp's own log line, rounded by it to 0.01 MiB
    logged_k_mib: float
    logged_v_mib: float
    bytes: int  # our arithmetic: cells x layers x (K row + V row)
    k_bytes: int
    v_bytes: int

    @property
    def agrees(self) -> bool:
        """Our bytes round to the very MiB figures llama.cpp printed (%.2f)."""
        return (
            f"{self.bytes / MIB:.2f}" == f"{self.logged_mib:.2f}"
            and f"{self.k_bytes / MIB:.2f}" == f"{self.logged_k_mib:.2f}"
            and f"{self.v_bytes / MIB:.2f}" == f"{self.logged_v_mib:.2f}"
        )


def allocations(engine: LocalSession) -> list[CacheAlloc]:
    """Every cache llama.cpp logged for this context, with our own byte count beside it."""
    info = engine.info
    out = []
    for rep in engine.kv_reports:
        tk = ggml.GGML_TYPES.get(rep.type_k, engine.type_k)
        tv = ggml.GGML_TYPES.get(rep.type_v, engine.type_v)
        k = rep.cells * rep.layers * ggml.row_size(tk, info.n_embd_k_gqa)
        v = rep.cells * rep.layers * ggml.row_size(tv, info.n_embd_v_gqa)
        out.append(
            CacheAlloc(
                rep.kind,
                rep.cells,
                rep.layers,
                rep.type_k,
                rep.type_v,
                rep.size_mib,
                rep.k_mib,
                rep.v_mib,
                k + v,
                k,
                v,
            )
        )
    return out


@dataclass
class MemoryReport:
    breakdown: KVBreakdown
    n_ctx: int  # tokens the context may hold (-c)
    n_cells: int  # cells llama.cpp allocated (rounded up)
    used_cells: int
    used_bytes: int
    allocated_bytes: int
    caches: list[CacheAlloc]
    calc: list[CalcRow]
    flash_attn: str
    notes: list[str] = field(default_factory=list)

    @property
    def used_fraction(self) -> float:
        return self.used_cells / self.n_cells if self.n_cells else 0.0


def memory_report(engine: LocalSession) -> MemoryReport:
    """Everything the memory pane shows, from the running engine (cheap: no Python loop over
    cells, a few ggml size queries)."""
    bd = breakdown_for(engine)
    caches = allocations(engine)
    allocated = sum(c.bytes for c in caches) or engine.kv_bytes_allocated
    notes = []
    if v_cache_is_quantized(ggml.GGML_TYPE_NAMES.get(engine.type_v, "")):
        notes.append(QUANTIZED_V_NOTE)
    elif engine.flash_attn_resolved == "off":
        notes.append(
            "flash attention is off here: the calculator's q8_0/q4_0 columns hold for K, "
            "but a quantized V would need -fa on."
        )
    fa_note = engine.flash_attn_note
    if fa_note:
        notes.append(f"llama.cpp: {fa_note}")
    if len(caches) > 1:
        notes.append(
            "sliding-window layers keep only the last n_swa tokens, so llama.cpp gives them "
            "a smaller cache of their own beside the full-context one."
        )
    placement = getattr(engine, "placement", None)  # GPU offload, from llama.cpp's log
    if placement is not None and (placement.gpu_build or placement.asked_layers != "0"):
        notes.append(f"where llama.cpp put the model: {placement.describe()}.")
    if engine.n_cells != engine.n_ctx:
        notes.append(
            f"llama.cpp rounds the cache up to {engine.n_cells:,} cells; "
            f"tokenstep lets the context hold {engine.n_ctx:,} (-c)."
        )
    return MemoryReport(
        breakdown=bd,
        n_ctx=engine.n_ctx,
        n_cells=engine.n_cells,
        used_cells=engine.kv.used,
        used_bytes=engine.kv_bytes_used,
        allocated_bytes=allocated,
        caches=caches,
        calc=calculator(bd, engine.info.n_ctx_train),
        flash_attn=engine.flash_attn_resolved,
        notes=notes,
    )


def config_problem(type_v: str, flash_attn: str) -> str | None:
    """The sentence to show instead of failing when a calculator choice cannot run."""
    if v_cache_is_quantized(type_v) and flash_attn == "off":
        return QUANTIZED_V_NOTE
    return None
