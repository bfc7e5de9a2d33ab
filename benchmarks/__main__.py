"""``make bench``: the benchmarks of the performance issues (8, ``tokenstep trace`` end to end;
9, attention memory; 10, the sampler chain; 11, the logit lens; 12, remote stepping; 13, speculative decoding; 14, compare in lockstep), each
figure beside its target.

Every benchmark runs tokenstep and the bare llama.cpp loop in the same process run, alternating,
and reports medians. Options: ``--only 1,4`` runs a subset; ``--quick`` uses fewer rounds."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable

from tui.engine import Model

from . import (
    attention_cost,
    attention_memory,
    bench_app,
    bench_chain,
    bench_compare,
    bench_engine,
    bench_lens,
    bench_memory,
    bench_remote,
    bench_render,
    bench_spec,
    bench_startup,
    bench_trace,
)
from .common import THREADS, Row, load


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def table(rows: list[Row]) -> str:
    """A Markdown table: it reads as plain text and pastes into the README as it is."""
    head = "| benchmark | figure | target | met | load | detail |"
    out = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        met = "-" if r.met is None else ("yes" if r.met else "**no**")
        out.append(f"| {r.benchmark} | {r.figure} | {r.target} | {met} | {r.load} | {r.detail} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__, allow_abbrev=False)
    ap.add_argument("--only", default="1,2,3,4,5,6,7,8,9,10,11,12,13,14", help="benchmarks to run, e.g. 1,4")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    args = ap.parse_args()
    wanted = {int(x) for x in args.only.split(",") if x.strip()}
    rounds = 1 if args.quick else 3
    model = Model()
    steps: list[tuple[int, str, Callable[[], list[Row]]]] = [
        (1, "engine", lambda: bench_engine.run(model, rounds=rounds)),
        (2, "app", lambda: bench_app.run(model, rounds=rounds, presses=20 if args.quick else 40)),
        (4, "render", lambda: bench_render.run(model)),
        (5, "attention", lambda: attention_cost.run(model, rounds=2 * rounds + 1)),
        (6, "start-up", lambda: bench_startup.run(rounds=2 * rounds + 1)),
        (7, "memory", bench_memory.run),
        (8, "trace", lambda: bench_trace.run(model, rounds=2 * rounds + 1)),
        (9, "attention memory", attention_memory.run),
        (10, "sampler chain", lambda: bench_chain.run(model, rounds=rounds)),
        (11, "lens", lambda: bench_lens.run(model, rounds=rounds)),
        (12, "remote", lambda: bench_remote.run(rounds=rounds)),
        (13, "speculative decoding", lambda: bench_spec.run(model, rounds=rounds)),
        (14, "compare", lambda: bench_compare.run(model, rounds=rounds)),
    ]
    rows: list[Row] = []
    failed: list[str] = []
    print(f"machine: {_machine()}", file=sys.stderr)
    for num, name, fn in steps:
        if num not in wanted and not (num == 2 and 3 in wanted):
            continue
        t0 = time.perf_counter()
        before = os.getloadavg()[0]
        print(f"[{name}] running ({load()})...", file=sys.stderr, flush=True)
        try:
            got = fn()
        except Exception as exc:  # one broken benchmark is a failed row, not a lost table
            traceback.print_exc()
            got = [Row(f"{num}. {name}", "failed", "runs", False, f"{type(exc).__name__}: {exc}")]
            failed.append(name)
        for r in got:  # the 1-minute load before and after: a figure moves with it
            r.load = f"{before:.1f}-{os.getloadavg()[0]:.1f}"
        if num == 2:
            got = [r for r in got if int(r.benchmark.split(".")[0]) in wanted]
        rows.extend(got)
        for r in got:  # as it comes, in case a later benchmark is interrupted
            print(f"  {r.benchmark}: {r.figure} (target {r.target}) {r.detail}", file=sys.stderr)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print()
    print(
        f"SmolLM2-135M-Instruct Q4_1, {THREADS} threads (the app: its default, cores - 1). Machine: "
        f"{_machine()}; {load()} at the end. Load: the 1-minute load average before and after "
        "each benchmark."
    )
    print()
    print(table(rows))
    missed = [r.benchmark for r in rows if r.met is False]
    print()
    print("all targets met" if not missed else "not met: " + "; ".join(missed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
