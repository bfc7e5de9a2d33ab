"""Benchmark 8: ``tokenstep trace`` end to end, process start included, against a bare script.

Both are fresh processes, timed from spawn to exit, alternating. ``tokenstep trace -n 256
--temp 0`` writes every record as a JSON line (to /dev/null); the bare script imports
llama_cpp, loads the model (extra buffers as tokenstep chooses them: off on an AMX build,
where they crash), makes a context, prefills the same prompt tokens and runs the same
greedy loop (256 argmax picks, 255 decodes: trace only samples its last token), nothing else.
The prompt is a count (``1, 2, 3, ...``), whose greedy continuation does not end early."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tui.engine import Model, default_model_path

from .bench_app import COUNTING
from .common import THREADS, Row, median

ROOT = Path(__file__).resolve().parent.parent
BARE = """
import sys
import llama_cpp
import numpy as np
path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompt = [int(t) for t in sys.argv[4].split(",")]
llama_cpp.llama_backend_init()
mp = llama_cpp.llama_model_default_params()
# as tokenstep loads: no extra buffers where llama.cpp has AMX kernels (they crash, #20824)
mp.use_extra_bufts = b"AMX_INT8 = 1" not in llama_cpp.llama_print_system_info()
model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
p = llama_cpp.llama_context_default_params()
p.n_ctx = 4096
p.n_threads = p.n_threads_batch = threads
ctx = llama_cpp.llama_init_from_model(model, p)
arr = (llama_cpp.llama_token * len(prompt))(*prompt)
assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(prompt))) == 0
tok = (llama_cpp.llama_token * 1)()
out = []
for i in range(n):
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
    tok[0] = int(np.argmax(logits))
    out.append(tok[0])
    if i < n - 1:
        assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tok, 1)) == 0
print(len(out))
"""


def _timed(argv: list[str]) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=600)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv[1:3]} failed: {done.stderr[-300:]!r}")
    return took, done.stdout


def run(model: Model, rounds: int = 5, n: int = 256) -> list[Row]:
    prompt = model_prompt(model)
    trace = [
        sys.executable, "-m", "tui", "trace", "-p", COUNTING, "-n", str(n), "--temp", "0",
        "-t", str(THREADS), "-c", "4096",
    ]  # fmt: skip
    bare = [
        sys.executable, "-c", BARE, str(default_model_path()), str(THREADS), str(n),
        ",".join(map(str, prompt)),
    ]  # fmt: skip
    _timed(bare)  # warm the page cache
    ours, theirs, ratios = [], [], []
    lines = 0
    for _ in range(rounds):
        o, out = _timed(trace)
        b, _ = _timed(bare)
        lines = out.count(b"\n")
        ours.append(o)
        theirs.append(b)
        ratios.append(b / o)
    ratio = median(ratios)
    return [
        Row(
            f"8. `tokenstep trace`, {n} tokens, end to end",
            f"{ratio:.3f} of bare",
            ">= 0.95",
            ratio >= 0.95,
            f"{median(ours):.2f} s vs bare script {median(theirs):.2f} s (process start, "
            f"model load, prefill, {n} greedy picks; {lines} JSON lines; medians of {rounds} "
            "alternating)",
        )
    ]


def model_prompt(model: Model) -> list[int]:
    """The trace's own prompt tokens (raw text, special tokens added as the trace adds them)."""
    from tui.engine import Engine, EngineConfig

    eng = Engine(model, EngineConfig(n_ctx=64, n_threads=THREADS))
    try:
        return eng.vocab.tokenize(COUNTING, add_special=True)
    finally:
        eng.close()


if __name__ == "__main__":
    for row in run(Model(), rounds=3):
        print(row)
