"""``tokenstep trace --lens``: when the head is read, and what ``lens_check`` names (issue 24:
fault 11 and the pick/top-1 confusion)."""

from __future__ import annotations

import json

import llama_cpp
import pytest

from tests.support.lens import forget_heads  # noqa: F401 (the cached GGUF head, freed after this module)
from tui.args import parse
from tui.engine.model import lens
from tui.engine.observe import lens_capture
from tui.trace_cli import trace_main


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
    real_decode = llama_cpp.llama_decode

    def decode(ctx, batch):  # type: ignore[no-untyped-def]
        events.append("decode")
        return real_decode(ctx, batch)

    def load(path: str, progress=None):  # type: ignore[no-untyped-def]
        events.append("head")
        return lens.load_head(path, progress)  # each call reads the file

    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    monkeypatch.setattr(lens_capture, "load_head", load)
    recs = _trace(capsys, "--lens", "-p", "The capital of France is", "-n", "3", "-t", "2")
    assert events.count("head") == 1 and events[0] == "head", events[:3]
    with_lens = [d for d in recs if "lens_check" in d]
    assert len(with_lens) == 3
    first = with_lens[0]["lens_check"]
    assert first["head_load_ms"] > 0
    assert all("head_load_ms" not in d["lens_check"] for d in with_lens[1:])


def test_lens_check_names_llama_cpps_top1_and_the_token_generated(capsys):
    """The confusion: ``lens_check.pick`` was llama.cpp's top-1, not the token sampled, and
    ``pick_rank`` was 0-based without saying so. Now ``top1`` / ``top1_rank`` are llama.cpp's
    top-1, ``pick`` / ``pick_rank`` the token generated (trace's ``sampled``), and the record
    says ranks are 0-based. With seed 7 at temperature 1.5 some steps sample another token."""
    recs = _trace(
        capsys, "--lens", "-p", "The cat sat", "-n", "6", "--temp", "1.5", "-s", "7", "-t", "2"
    )
    steps = [d for d in recs if "lens_check" in d]
    assert len(steps) == 6
    differ = 0
    for d in steps:
        check, layers = d["lens_check"], d["lens"]
        assert check["top1"]["id"] == d["top"][0]["id"]  # llama.cpp's own top-1
        assert check["pick"]["id"] == d["sampled"]["id"] and check["pick"]["forced"] is False
        assert check["ranks"].startswith("0-based")
        differ += check["pick"]["id"] != check["top1"]["id"]
        for e in layers:
            ids = [t["id"] for t in e["top"]]
            for key, tok in (("top1", check["top1"]["id"]), ("pick", check["pick"]["id"])):
                if tok in ids:  # in the layer's top 5: its 0-based rank is its index there
                    assert e[f"{key}_rank"] == ids.index(tok)
                    assert e[f"{key}_p"] == pytest.approx(e["top"][ids.index(tok)]["p"], abs=1e-6)
                else:
                    assert e[f"{key}_rank"] >= 5
        first5 = next((e["layer"] for e in layers if e["pick_rank"] < 5), None)
        assert check["pick_top5_layer"] == first5
    assert differ >= 1


def test_the_picks_rank_matches_numpy(model, model_path):
    """The sampled token's rank and p at a middle layer, recomputed in float64 NumPy from the
    captured ``l_out-15`` row and the GGUF head (the oracle in tests/support/lens.py)."""
    import numpy as np

    from tests.support.lens import numpy_head
    from tui.engine import Engine, EngineConfig, SamplerSettings
    from tui.engine.observe.lens_capture import LensCapture
    from tui.engine.run import loop

    cap = LensCapture(n_layer=model.info.n_layer, capture=("l_out-15",))
    settings = SamplerSettings(temp=1.5, seed=7)
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2), settings, [cap])
    try:
        n = 0
        for rec in loop.generate(eng, 4, eng.vocab.tokenize("The cat sat", add_special=True)):
            if not rec.has_logits:
                continue
            assert cap.note_pick(eng, rec)
            hidden = cap.captured["l_out-15"][-1].reshape(-1, model.info.n_embd)[-1]
            logits = numpy_head(model_path, hidden, None)
            pick = rec.sampled
            entry = rec.extras["lens"][15]
            assert entry["pick_rank"] == int((logits > logits[pick]).sum())
            z = np.exp(logits - logits.max()).sum()
            assert entry["pick_p"] == pytest.approx(
                np.exp(logits[pick] - logits.max()) / z, abs=1e-4
            )
            n += 1
        assert n == 4
    finally:
        eng.close()
