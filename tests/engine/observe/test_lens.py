"""The logit lens against outside oracles: llama.cpp's own logits (the last layer) and a NumPy
recomputation of the head from a captured ``l_out`` (a middle layer), on SmolLM2 (llama, tied,
Q8_0 head) and on a tiny Gemma-2 written here (tied, float32, final soft-capping)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import run_cli
from tests.support.lens import MIDDLE, forget_heads, head_arrays, numpy_head  # noqa: F401 (fixtures)
from tests.support.swa_model import write_swa_model
from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.engine.observe.lens_capture import AttentionLensCapture, LensCapture
from tui.engine.run import loop

# SmolLM2's head is Q8_0: llama.cpp multiplies it quantized, with its input quantized to Q8_0
# too (blocks of 32, scale d = max|x|/127), and the lens in float32 without that rounding. The
# tolerance is not a measured number but the bound that rounding allows, token by token:
# |Δlogit_t| <= sum over blocks b of d_b/2 * sum_{i in b} |w_ti| (see ``q8_bound``). Measured
# against it: 0.21 to 0.27 on an AVX-512 build, up to 0.36 on an AVX2 build, both within it.
SMOL_TOL = None
GEMMA_TOL = 1e-3  # float32 weights on both sides


def q8_bound(path: Path, hidden: np.ndarray) -> np.ndarray:
    """Per token, how far llama.cpp's Q8_0 head can land from the exact product: the head's
    input (the normed last hidden state) is rounded to Q8_0, each element by at most half its
    block's scale, and each rounding moves logit t by at most that times |w_ti|."""
    head = head_arrays(path)
    h = hidden.astype(np.float64)
    x = h / np.sqrt(np.mean(h * h) + head.eps) * head.norm
    half = np.abs(x).reshape(-1, 32).max(axis=1) / 127 / 2  # d_b / 2
    return head.abs_blocks @ half.astype(np.float32) + 1e-3  # and float32 sums' own rounding


def _run(
    model: Model, prompt: str, n: int, middle: int, *, last: bool = False
) -> tuple[Engine, LensCapture, list]:
    names = (f"l_out-{middle}",) + ((f"l_out-{model.info.n_layer - 1}",) if last else ())
    cap = LensCapture(n_layer=model.info.n_layer, capture=names)
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2), SamplerSettings(temp=0.0), [cap])
    out = []
    for rec in loop.generate(eng, n, eng.vocab.tokenize(prompt, add_special=True)):
        if rec.has_logits:
            assert "lens" in rec.extras, rec.extras.get("lens_problems")
            hidden = cap.captured[f"l_out-{middle}"][-1].reshape(-1, model.info.n_embd)[-1]
            logits = eng.logits
            assert logits is not None
            row = (rec, hidden.copy(), logits.copy())
            if last:
                key = f"l_out-{model.info.n_layer - 1}"
                row += (cap.captured[key][-1].reshape(-1, model.info.n_embd)[-1].copy(),)
            out.append(row)
    return eng, cap, out


def _check_last_layer(out: list, tol: float | None, path: Path | None = None) -> int:
    """The last layer against llama.cpp's logits; returns in how many steps the top 5 is the
    same set as llama.cpp's. Where it differs, each token in one set and not the other is
    within the rounding (twice the tolerance) of llama.cpp's 5th logit: a near tie, not a wrong
    token. ``tol`` None: the tolerance is :func:`q8_bound`'s, token by token."""
    same = 0
    for rec, _hidden, final, *last_hidden in out:
        bound = (
            q8_bound(path, last_hidden[0])
            if tol is None and path is not None
            else np.full(final.shape, tol)
        )
        last = rec.extras["lens"][-1]["top"]
        check = rec.extras["lens_check"]
        assert check["max_abs_diff"] <= float(bound.max())
        if tol is None:  # the record's own bound is this one, derived in the engine
            assert abs(check["rounding_bound"] - float(bound.max())) < 0.01 * float(bound.max())
        for t in last:  # each top logit against llama.cpp's logit for the same token
            assert abs(t["logit"] - float(final[t["id"]])) <= bound[t["id"]]
        order = np.argsort(-final)
        assert check["top1"]["id"] == int(order[0])
        if last[0]["id"] != int(order[0]):  # only at a near tie of llama.cpp's top two
            a, b = last[0]["id"], int(order[0])
            assert float(final[b] - final[a]) <= bound[a] + bound[b]
        mine, theirs = {t["id"] for t in last}, set(order[:5].tolist())
        same += mine == theirs
        for t in mine ^ theirs:
            edge = int(order[4])
            assert abs(float(final[t]) - float(final[edge])) <= bound[t] + bound[edge]
    return same


def _check_middle(out: list, path: Path, layer: int, softcap: float | None) -> None:
    for rec, hidden, _final, *_ in out:
        logits = numpy_head(path, hidden, softcap)
        order = np.argsort(-logits)[:5]
        entry = rec.extras["lens"][layer]
        assert entry["layer"] == layer
        assert [t["id"] for t in entry["top"]] == order.tolist()
        z = np.exp(logits - logits.max()).sum()
        for t in entry["top"]:
            assert t["logit"] == pytest.approx(logits[t["id"]], abs=2e-3)
            assert t["p"] == pytest.approx(np.exp(logits[t["id"]] - logits.max()) / z, abs=1e-4)
        top1 = rec.extras["lens_check"]["top1"]["id"]
        assert entry["top1_rank"] == int((logits > logits[top1]).sum())


def test_lens_on_smollm2_matches_llama_cpp_and_numpy(model: Model, model_path: Path) -> None:
    eng, cap, out = _run(model, "The capital of France is", 8, MIDDLE, last=True)
    try:
        assert len(out) >= 8
        for rec, *_ in out:
            lens = rec.extras["lens"]
            assert [e["layer"] for e in lens] == list(range(model.info.n_layer))
            assert all(len(e["top"]) == 5 for e in lens)
        assert _check_last_layer(out, SMOL_TOL, model_path) >= len(out) // 2
        _check_middle(out, model_path, MIDDLE, None)
        check = out[0][0].extras["lens_check"]
        assert check["top1"]["piece"] == " Paris"
        ranks = [e["top1_rank"] for e in out[0][0].extras["lens"]]
        first1 = ranks.index(0)
        assert check["top1_layer"] == first1
        assert check["top5_layer"] == next(i for i, r in enumerate(ranks) if r < 5)
        assert cap.n_replayed > 0  # the steps replayed the ask plan
    finally:
        eng.close()


@pytest.fixture(scope="module")
def gemma_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # output norm 30: final logits around 10 to 15, where the soft-cap of 30 bends them
    return write_swa_model(tmp_path_factory.mktemp("lens") / "gemma2-lens.gguf", output_norm=30.0)


def test_lens_on_gemma2_with_softcap(gemma_path: Path) -> None:
    model = Model(gemma_path)
    try:
        assert model.info.arch == "gemma2"
        eng, _cap, out = _run(model, "Hello world", 6, 1)
        try:
            assert _check_last_layer(out, GEMMA_TOL) == len(out)
            _check_middle(out, gemma_path, 1, 30.0)
            # the soft-cap matters here: without it the last layer would be off by far more
            rec, _, final = out[0]
            top = rec.extras["lens"][-1]["top"][0]
            assert 30 * np.arctanh(top["logit"] / 30) - float(final[top["id"]]) > 0.2
            assert "soft-cap 30" in rec.extras["lens_check"]["head"]
        finally:
            eng.close()
    finally:
        model.close()


def test_lens_with_attention_on_one_callback(model: Model) -> None:
    cap = AttentionLensCapture(n_layer=model.info.n_layer, layers=[3], lens=True)
    config = EngineConfig(n_ctx=256, n_threads=2, flash_attn="off")
    eng = Engine(model, config, SamplerSettings(temp=0.0), [cap])
    try:
        recs = list(loop.generate(eng, 2, eng.vocab.tokenize("Hi there", add_special=True)))
        last = recs[-1]
        assert 3 in last.extras["attention"]
        assert len(last.extras["lens"]) == model.info.n_layer
        cap.set_lens(False)
        cap.set_layers([4])  # attention's layer change keeps the lens off, and vice versa
        assert b"l_out-0" not in cap.wanted and b"kq_soft_max-4" in cap.wanted
        cap.set_lens(True)
        assert b"l_out-0" in cap.wanted and b"kq_soft_max-4" in cap.wanted
    finally:
        eng.close()


def test_trace_lens_flag() -> None:
    r = run_cli("trace", "--lens", "-p", "The capital of France is", "-n", "2", "-t", "2")
    assert r.returncode == 0, r.stderr.decode()
    recs = [json.loads(line) for line in r.stdout.decode().splitlines()]
    with_logits = [d for d in recs if "top" in d]
    assert with_logits
    for d in with_logits:
        assert [e["layer"] for e in d["lens"]] == list(range(30))
        for e in d["lens"]:
            assert len(e["top"]) >= 5
            assert set(e["top"][0]) >= {"id", "piece", "logit", "p"}
        check = d["lens_check"]
        # The lens's last layer is llama.cpp's logits up to the head's 8-bit activation
        # rounding, whose bound the record states (derived again in NumPy: q8_bound).
        assert 0 < check["max_abs_diff"] <= check["rounding_bound"] < 5
        lens_top, top = d["lens"][-1]["top"][0]["id"], d["top"]
        if lens_top != top[0]["id"]:  # a near tie, within the rounding of both sides
            theirs = next(t["logit"] for t in top if t["id"] == lens_top)
            assert top[0]["logit"] - theirs <= 2 * check["rounding_bound"]


def test_lens_says_so_for_a_decode_of_several_sequences(model: Model) -> None:
    cap = LensCapture(n_layer=model.info.n_layer)
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2), SamplerSettings(temp=0.0), [cap])
    try:
        eng.prefill(eng.vocab.tokenize("Once upon a time", add_special=True))
        eng.fork(0)
        rec = eng.step_seqs()
        assert rec is not None and len(rec.rows) == 2
        assert "lens" not in rec.extras
        assert "a fork" in rec.extras["lens_problems"][0]
    finally:
        eng.close()
