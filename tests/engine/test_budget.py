"""The memory a context will take, estimated before llama.cpp allocates it.

Oracle: llama.cpp's own log of the buffers it allocated (the KV cache line and the scheduler's
"compute buffer size" line), for contexts small enough to create here."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.cli import one_sentence, run_cli
from tui.engine import Engine, EngineConfig, Model
from tui.engine.model import budget
from tui.engine.model.context import context_budget

MIB = 1 << 20


def _estimate(model: Model, cfg: EngineConfig, fa_on: bool) -> budget.ContextBudget:
    return context_budget(model, cfg, flash_attn_on=fa_on, model_bytes=0)


@pytest.mark.parametrize("fa", ["off", "on"])
@pytest.mark.parametrize("n_ctx", [4096, 16384])
def test_estimate_matches_llama_cpp_log(model: Model, n_ctx: int, fa: str) -> None:
    cfg = EngineConfig(n_ctx=n_ctx, n_threads=1, flash_attn=fa)
    eng = Engine(model, cfg)
    try:
        kv_logged = sum(r.size_mib for r in eng.kv_reports) * MIB
        compute = [
            float(m.group(1)) * MIB
            for line in eng.log_lines
            if (m := re.search(r"compute buffer size =\s*([\d.]+) MiB", line))
        ]
        est = _estimate(model, cfg, fa_on=eng.flash_attn_resolved == "on")
    finally:
        eng.close()
    assert est.kv_bytes == pytest.approx(kv_logged, abs=0.01 * MIB)
    assert compute and est.compute_bytes == pytest.approx(sum(compute), rel=0.05)


def test_largest_n_ctx_fits(model: Model) -> None:
    est = _estimate(model, EngineConfig(n_ctx=1 << 20), fa_on=False)
    avail = 4 << 30
    fits = est.largest_n_ctx(avail)
    again = _estimate(model, EngineConfig(n_ctx=fits), fa_on=False)
    bigger = _estimate(model, EngineConfig(n_ctx=fits + 256), fa_on=False)
    assert fits > 0 and again.total <= avail < bigger.total
def test_a_context_larger_than_memory_is_one_sentence() -> None:
    """-c 1048576 with flash attention off needs about 45 GB: refused before llama.cpp
    allocates anything, with both figures and the largest -c that fits."""
    msg = one_sentence(
        run_cli("trace", "-c", "1048576", "-fa", "off", "-p", "hi", "-n", "1"),
        "would need about",
        "available",
        "largest -c that fits",
    )
    assert re.search(r"KV cache [\d,]+ MiB", msg)


def test_the_default_flash_attention_case_as_reported() -> None:
    """The reported case (`trace -c 1048576 -p hi -n 1`, 23.3 GB of RSS), with the memory
    said to be available pinned so the figure does not depend on this machine."""
    env = {"TOKENSTEP_MEMORY_AVAILABLE": str(8 << 30)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        res = run_cli("trace", "-c", "1048576", "-p", "hi", "-n", "1")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    msg = one_sentence(res, "8,192 MiB are available")
    assert "largest -c that fits" in msg
