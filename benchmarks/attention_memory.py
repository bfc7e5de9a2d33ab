"""Benchmark 8: peak RSS with attention capture on, after 500, 1,000 and 2,000 tokens (one
child process each, so every figure is its own peak).

Before the weight store (:mod:`tui.engine.record.attention_store`) the peak grew with the square of
the tokens (286, 313, 355, 409 MB at 500 to 2,000 with ``--attention 13 -c 4096``): every
step's weights stayed in memory. The target: flat, within 32 MB from 500 to 2,000 tokens
(the KV cache is allocated in full up front, so it does not grow)."""

from __future__ import annotations

import json
import subprocess
import sys

from .bench_memory import _HWM, MB, ROOT
from .common import Row

SIZES = (500, 1000, 2000)
FLAT_MB = 32

_CHILD = (
    _HWM
    + """
import json
from tui.engine import Engine, EngineConfig, Model
from tui.engine.observe.attention_capture import AttentionCapture
from tui.engine.observe.attention_map import context_attention
from benchmarks.common import prompt_of
m = Model()
prompt = prompt_of(m, 16)
cap = AttentionCapture(m.info.n_layer, [13])
eng = Engine(m, EngineConfig(n_ctx=4096, n_threads=2, flash_attn="off"), observers=[cap])
eng.prefill(prompt)
while eng.n_past < N_TOKENS:
    if eng.step() is None:  # end of generation: keep going with a forced token
        eng.step(force=prompt[eng.n_past % len(prompt)])
att = context_attention(eng, 13)  # what the Attention pane reads: the rows it draws
rows = [att.row(i, None) for i in range(max(0, N_TOKENS - 40), N_TOKENS)]
print(json.dumps({"rss": HWM(), "n": eng.n_past, "rows": len(rows)}))
"""
)


def _child(n_tokens: int) -> int:
    """Peak RSS of one child that plays ``n_tokens`` one step at a time (slow: a step with
    the capture on takes a graph split and a copy; minutes on a loaded 2-core machine)."""
    code = _CHILD.replace("N_TOKENS", str(n_tokens))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=3600
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "child failed")
    return int(json.loads(out.stdout.strip().splitlines()[-1])["rss"])


def run() -> list[Row]:
    peaks = {n: _child(n) for n in SIZES}
    growth = (peaks[SIZES[-1]] - peaks[SIZES[0]]) / MB
    return [
        Row(
            f"9. peak RSS, attention on, {SIZES[0]} to {SIZES[-1]} tokens",
            f"+{growth:.0f} MB",
            f"<= +{FLAT_MB} MB (flat)",
            growth <= FLAT_MB,
            ", ".join(f"{n}: {rss / MB:.0f} MB" for n, rss in peaks.items()),
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
