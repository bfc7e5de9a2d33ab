"""``tokenstep trace --lens``: when the head is read, and what ``lens_check`` names (issue 24:
fault 11 and the pick/top-1 confusion)."""

from __future__ import annotations

import json

import llama_cpp
import pytest

from tui.args import parse
from tui.commands import trace_main
from tui.engine import lens, lens_capture


def _trace(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    cmd, args = parse(["trace", *argv])
    assert cmd == "trace" and trace_main(args) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_trace_lens_reads_the_head_before_the_first_decode(capsys, monkeypatch):
    """Fault 11: the one-time head read (dequantizing SmolLM2's 49,152 x 576 Q8_0 matrix) ran
    inside the first decode's step, so step 0 looked 80 to 160 times slower than without
    --lens. Now it runs before any llama_decode, and the first lens record reports it as
    ``lens_check["head_load_ms"]``, apart from ``decode_ms`` and the projection's ``ms``."""
    events: list[str] = []
    real_decode, real_load = llama_cpp.llama_decode, lens.load_head

    def decode(ctx, batch):  # type: ignore[no-untyped-def]
        events.append("decode")
        return real_decode(ctx, batch)

    def load(path: str):  # type: ignore[no-untyped-def]
        events.append("head")
        return real_load.__wrapped__(path)  # the uncached read, as a fresh process does

    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    monkeypatch.setattr(lens_capture, "load_head", load)
    recs = _trace(capsys, "--lens", "-p", "The capital of France is", "-n", "3", "-t", "2")
    assert events.count("head") == 1 and events[0] == "head", events[:3]
    with_lens = [d for d in recs if "lens_check" in d]
    assert len(with_lens) == 3
    first = with_lens[0]["lens_check"]
    assert first["head_load_ms"] > 0
    assert all("head_load_ms" not in d["lens_check"] for d in with_lens[1:])
