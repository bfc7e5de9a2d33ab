"""Shared pieces of the benchmarks: result rows, prompts, medians, machine load."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from tui.engine import Engine, EngineConfig, Model

THREADS = 2
TEXT = "The history of the printing press is a story of many hands and many cities. "


@dataclass
class Row:
    """One line of the table: a figure beside its target."""

    benchmark: str
    figure: str  # what was measured, formatted
    target: str
    met: bool | None  # None: reported only, no target
    detail: str = ""  # bare-loop figure, ratio, medians
    load: str = ""  # the machine's 1-minute load average while it was measured


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def prompt_of(model: Model, n_tokens: int) -> list[int]:
    """``n_tokens`` tokens of plain text (a sentence repeated), no special tokens."""
    eng = Engine(model, EngineConfig(n_ctx=64, n_threads=THREADS))
    try:
        base = eng.vocab.tokenize(TEXT, add_special=False)
    finally:
        eng.close()
    return (base * (n_tokens // len(base) + 1))[:n_tokens]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min) on {os.cpu_count()} cores"
