"""Benchmark 7: peak RSS of the app autoplaying 256 tokens headless (a child process, so the
figure is its own), against the model file + the KV cache llama.cpp allocated + 150 MB. A
child running the bare loop on the same context size gives the floor for comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .common import Row

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
N_CTX = 4096

# VmHWM, not getrusage: ru_maxrss survives exec, so a child would inherit its parent's peak.
_HWM = """
def HWM():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
"""

_APP_CHILD = (
    _HWM
    + """
import asyncio, json
from tui.engine import Model, default_model_path
from benchmarks import bench_app
m = Model()
asyncio.run(bench_app._autoplay(m, 256))
print(json.dumps({"rss": HWM()}))
"""
)

_BARE_CHILD = (
    _HWM
    + """
import json
from tui.engine import Engine, EngineConfig, Model
from benchmarks.bare import bare_generate
from benchmarks.common import prompt_of
m = Model()
eng = Engine(m, EngineConfig(n_ctx=N_CTX, n_threads=2))
kv = eng.kv_bytes_allocated
eng.close()
bare_generate(m, prompt_of(m, 16), 256, n_ctx=N_CTX)
print(json.dumps({"rss": HWM(), "kv": kv}))
""".replace("N_CTX", str(N_CTX))
)


def _child(code: str) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "child failed")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run() -> list[Row]:
    from tui.engine import default_model_path

    model_bytes = default_model_path().stat().st_size
    bare = _child(_BARE_CHILD)
    app = _child(_APP_CHILD)
    kv = bare["kv"]
    over = (app["rss"] - model_bytes - kv) / MB
    return [
        Row(
            "7. peak RSS, app autoplay 256 tokens",
            f"+{over:.0f} MB over model+KV",
            "<= +150 MB",
            over <= 150,
            f"{app['rss'] / MB:.0f} MB; model file {model_bytes / MB:.0f} MB, KV ({N_CTX} cells) "
            f"{kv / MB:.0f} MB; bare loop peak {bare['rss'] / MB:.0f} MB",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
