"""Benchmark 11: what the logit lens costs per step.

The projection is n_layer × n_vocab × n_embd multiply-adds (SmolLM2: 30 × 49,152 × 576, 0.85
G) on the float32 head, plus the softmax and top 5 of every layer; the capture adds one graph
split per layer (each ``l_out-N`` is copied when it is ready). Both engines decode the same
greedy continuation, alternating, so a busy neighbour slows them alike. Reported, no target.
"""

from __future__ import annotations

import time

from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.engine.model.lens import load_head
from tui.engine.observe.lens_capture import LensCapture
from tui.engine.run import loop

from .common import THREADS, Row, median, prompt_of


def _steps(eng: Engine, prompt: list[int], n: int) -> tuple[list[float], list[float]]:
    """Decode ms and lens projection ms of ``n`` steps after the prompt."""
    eng.reset()
    decode, project = [], []
    for rec in loop.generate(eng, n, prompt):
        if rec.phase == "decode":
            decode.append(rec.decode_ms)
            if "lens_check" in rec.extras:
                project.append(rec.extras["lens_check"]["ms"])
    return decode, project


def run(model: Model, *, rounds: int = 3, n: int = 16) -> list[Row]:
    t0 = time.perf_counter()
    head = load_head(str(model.path))
    load_s = time.perf_counter() - t0
    prompt = prompt_of(model, 32)
    config = EngineConfig(n_ctx=256, n_threads=THREADS)
    plain = Engine(model, config, SamplerSettings(temp=0.0))
    cap = LensCapture(n_layer=model.info.n_layer)
    cap.use_head(head)  # the head read above: no step pays for a second read
    lens = Engine(model, config, SamplerSettings(temp=0.0), [cap])
    try:
        d_plain: list[float] = []
        d_lens: list[float] = []
        proj: list[float] = []
        for _ in range(rounds):
            d_plain += _steps(plain, prompt, n)[0]
            d, p = _steps(lens, prompt, n)
            d_lens += d
            proj += p
    finally:
        plain.close()
        lens.close()
    info = model.info
    macs = info.n_layer * head.out.shape[0] * info.n_embd
    return [
        Row(
            "11.1 lens projection, all layers",
            f"{median(proj):.1f} ms/step",
            "reported",
            None,
            f"{info.n_layer} layers x {head.out.shape[0]:,} x {info.n_embd} = "
            f"{macs / 1e9:.2f} G multiply-adds; median of {len(proj)} steps",
        ),
        Row(
            "11.2 decode with the lens's capture",
            f"{median(d_lens):.1f} ms/step",
            "reported",
            None,
            f"without: {median(d_plain):.1f} ms/step (one graph split per layer)",
        ),
        Row(
            "11.3 lens head read and dequantized",
            f"{load_s:.2f} s once",
            "reported",
            None,
            f"{head.out_name} as float32: {head.out.nbytes / 2**20:.0f} MiB",
        ),
    ]
