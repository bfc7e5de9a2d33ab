"""The engine against oracles we did not write: llama-cpp-python's own ``Llama`` class."""

from __future__ import annotations

import json

import llama_cpp
import numpy as np
import pytest
from llama_cpp import Llama

from tests.support.cli import run_cli
from tests.support.oracles import logits_oracle
from tui.engine import SamplerSettings
from tui.engine.run import loop

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]


@pytest.fixture(scope="module", params=[False, True], ids=["fa-off", "fa-on"])
def oracle(request, model_path):
    llm = logits_oracle(model_path, 512, flash_attn=request.param)
    yield llm, ("on" if request.param else "off")
    llm.close()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_trace_equals_llama_completion(prompt, model_path):
    """`tokenstep trace --temp 0` picks the same tokens as Llama's own greedy generate."""
    n = 12
    res = run_cli("trace", "-p", prompt, "-n", str(n), "--temp", "0", "-c", "512", "-fa", "off")
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.decode().splitlines()]
    ours = [r["sampled"]["id"] for r in records if r.get("sampled")]

    llm = Llama(model_path=str(model_path), n_ctx=512, flash_attn=False, verbose=False)
    EOG = {llm.token_eos()} | {
        t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)
    }
    try:
        toks = llm.tokenize(prompt.encode(), add_bos=True, special=False)
        assert records[0]["batch"] and [b["id"] for b in records[0]["batch"]] == toks
        theirs = []
        for t in llm.generate(toks, top_k=1, temp=0.0, repeat_penalty=1.0):
            theirs.append(t)
            if len(theirs) == len(ours) or t in EOG:
                break
        text = llm.detokenize(theirs).decode("utf-8", errors="replace")
    finally:
        llm.close()
    assert ours == theirs
    assert text == "".join(
        bytes.fromhex(r["sampled"]["bytes"]).decode("utf-8", "replace") for r in records
    )


def test_top_logits_equal_llama_scores(oracle, make_engine):
    """Every step's top-10 logits equal the rows Llama computes with logits_all."""
    llm, fa = oracle
    eng = make_engine(SamplerSettings(temp=0.0), flash_attn=fa, n_batch=512)
    toks = eng.vocab.tokenize(PROMPTS[2])
    records = list(loop.generate(eng, 8, toks))
    ids = toks + [r.call.tokens[0].id for r in records[1:]]
    # Decode the same way we do (prompt in one batch, then one token per call): batched and
    # incremental decodes differ by float rounding, which `verify` shows on its own.
    llm.reset()
    llm.eval(toks)
    for t in ids[len(toks) :]:
        llm.eval([t])
    scores = np.asarray(llm.scores[: llm.n_tokens])
    for rec in records:
        row = rec.call.tokens[-1].pos
        for c in rec.top:
            assert abs(c.logit - scores[row, c.id]) < 1e-4, (rec.index, c.id)
        # and the top-10 is the top-10 of Llama's row
        assert [c.id for c in rec.top] == list(np.argsort(-scores[row], kind="stable")[:10])


def test_engine_logits_row_is_exact_copy(make_engine):
    eng = make_engine()
    eng.prefill(eng.vocab.tokenize("Hello"))
    assert eng.logits is not None and eng.logits.shape == (eng.info.n_vocab,)
    assert eng.logits.dtype == np.float32
