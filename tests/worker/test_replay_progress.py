"""The observer's replay and the lens's head read say how far they are while they run: the
replay's own counts (operations and tokens done of those it set out to run) and the head's
bytes read of the matrix's, in views sent from the worker's thread at most every
``PROGRESS_INTERVAL``, the last figure always."""

from __future__ import annotations

import math
import re
import time

import gguf
import pytest

from tui.engine import SamplerSettings
from tui.engine.model import lens
from tui.engine.model.gguf_header import read_header
from tui.engine.run.replay import DecodeOp
from tui.worker import Worker
from tui.worker.commands import AttentionTabs, AttentionToggle, LensShown, Send, Step
from tui.worker.publisher import PROGRESS_INTERVAL
from tui.worker.views import View

FIGURES = re.compile(r"(\d+) of (\d+) operation\(s\), (\d+) of (\d+) token\(s\)")
MIB = re.compile(r"(\d+\.\d) of (\d+\.\d) MiB read")
TURNS = ("Name three colors.", "And three animals?", "And three fruits?")


def _chat(make_engine) -> Worker:
    """A worker with a chat of three turns, four tokens stepped after each message."""
    w = Worker(
        make_engine(SamplerSettings(temp=0.0)), raw=False, autoplay=False, close_engine=False
    )
    for text in TURNS:
        w.handle(Send(text))
        for _ in range(4):
            w.handle(Step())
    return w


def _record(w: Worker) -> list[tuple[float, View]]:
    """Every view the worker sends, taken at once (as an app that keeps up would)."""
    seen: list[tuple[float, View]] = []

    def on_view(view: View) -> None:
        seen.append((time.monotonic(), view))
        w.take()

    w.on_view = on_view
    return seen


def _figures(text: str) -> tuple[int, int, int, int] | None:
    m = FIGURES.search(text)
    return (int(m[1]), int(m[2]), int(m[3]), int(m[4])) if m else None


def test_attention_replay_reports_its_counts_paced(make_engine) -> None:
    w = _chat(make_engine)
    ops = list(w.engine.local.replay.ops)  # what a fresh observer context replays
    n = len(ops)
    m = sum(op.call.n_tokens for op in ops if isinstance(op, DecodeOp))
    assert n > 10 and m > n
    seen = _record(w)
    w.handle(AttentionTabs(True, False))
    t0 = time.monotonic()
    w.handle(AttentionToggle())
    took = time.monotonic() - t0
    w.publisher.publish(force=True)  # the command's own view, as the worker loop sends it

    progress = [(t, v) for t, v in seen if v.busy is not None and _figures(v.busy)]
    figures = [_figures(v.attention.status) for _, v in progress]
    assert all(f is not None for f in figures), [v.attention.status for _, v in progress]
    assert all(f == _figures(v.busy) for f, (_, v) in zip(figures, progress, strict=True))
    done = [f[0] for f in figures if f is not None]
    assert len(set(done)) >= 2, figures
    assert done == sorted(done) and len(set(done)) == len(done), done  # one view per figure
    assert all(f is not None and f[1] == n and f[3] == m for f in figures), (n, m, figures)
    assert figures[0] == (0, n, 0, m)
    assert figures[-1] == (n, n, m, m)
    # Tokens follow the operations: a memory edit adds none, a decode its batch's.
    tokens = [f[2] for f in figures if f is not None]
    assert tokens == sorted(tokens)
    # Paced: the first and the last always, the rest at most one every PROGRESS_INTERVAL.
    assert len(progress) <= 2 + math.floor(took / PROGRESS_INTERVAL), (len(progress), took)
    # The pane never draws weights from a half-replayed context; after the replay it does.
    assert all(v.attention.att is None for _, v in progress)
    last = seen[-1][1]
    assert last.busy is None and last.attention.att is not None
    assert "captured from kq_soft_max-0" in last.attention.status
    assert w.observers.progress is None and w.observers.ctx is not None
    assert w.observers.ctx.replayed == sum(isinstance(op, DecodeOp) for op in ops)


def test_lens_reports_the_heads_read_then_the_replay(make_engine, model_path, monkeypatch) -> None:
    monkeypatch.setattr(lens, "_kept", {})  # a fresh process: the head is read from the file
    hdr = read_header(model_path)
    t = next(t for t in hdr.tensors if t.name in ("output.weight", "token_embd.weight"))
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.ggml_type)]
    total = math.prod(t.shape[1:]) * (t.shape[0] // block * size)  # the matrix's bytes
    assert total > 2 * lens.HEAD_CHUNK  # read in several chunks
    w = _chat(make_engine)
    seen = _record(w)
    w.handle(LensShown(True))
    w.publisher.publish(force=True)  # the command's own view

    reads = [MIB.search(v.lens.status) for _, v in seen if v.lens is not None]
    mib = [float(r[1]) for r in reads if r]
    assert len(set(mib)) >= 2, [v.lens.status for _, v in seen]
    assert mib == sorted(mib)
    assert all(r is None or r[2] == f"{total / (1 << 20):.1f}" for r in reads)
    assert mib[-1] == pytest.approx(total / (1 << 20), abs=0.05)
    replay = [f for _, v in seen if v.lens is not None and (f := _figures(v.lens.status))]
    assert len({f[0] for f in replay}) >= 2, replay
    assert replay[-1][0] == replay[-1][1] and replay[-1][2] == replay[-1][3]
    first_replay = next(i for i, (_, v) in enumerate(seen) if v.lens and _figures(v.lens.status))
    last_read = max(i for i, (_, v) in enumerate(seen) if v.lens and MIB.search(v.lens.status))
    assert last_read < first_replay  # the head is read before any decode is replayed
    assert seen[-1][1].lens.step is not None  # then the lens shows a step
