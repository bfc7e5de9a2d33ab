"""/force TEXT and /p TEXT in the chat box: any token of the vocabulary can be forced by its
text or id, and one token's rank, logit and p at this step are read from the full logits row
(checked against llama-cpp-python's own ``Llama`` scores), or from the top K over HTTP."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support.app import SIZE, chat, make_app, run_async, send, wait_for
from tests.support.llama_server import llama_server  # noqa: F401
from tests.support.oracles import logits_oracle
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.sampler.lookup import standing, standing_top_k
from tui.worker import slash

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def oracle(model_path):
    llm = logits_oracle(model_path, 256, flash_attn=True)
    yield llm
    llm.close()


def test_standing_is_llama_cpp_pythons_row(make_engine, oracle):
    eng = make_engine(SamplerSettings(temp=0.0))
    toks = eng.vocab.tokenize(PROMPT)
    eng.prefill(toks)
    assert eng.logits is not None
    oracle.reset()
    oracle.eval(toks)
    row = np.asarray(oracle.scores[len(toks) - 1], dtype=np.float64)
    order = np.argsort(-row, kind="stable")  # rank by sorting, not by counting
    lse = np.logaddexp.reduce(row)
    paris = eng.vocab.tokenize(" Paris", add_special=False)
    assert len(paris) == 1
    for token in (int(order[0]), paris[0], int(order[40]), int(order[-1])):
        st = standing(eng.logits, token)
        want_rank = int(np.nonzero(order == token)[0][0]) + 1
        assert st.rank == want_rank or st.ties, (token, st.rank, want_rank)
        assert st.logit == pytest.approx(row[token], abs=1e-2)
        assert st.p == pytest.approx(math.exp(row[token] - lse), rel=1e-2, abs=1e-9)
        assert st.n_vocab == eng.info.n_vocab
    assert standing(eng.logits, int(order[0])).rank == 1


def test_standing_over_http_knows_only_the_top_k():
    row = np.full(10, -9.0, dtype=np.float32)
    row[[3, 7, 1]] = np.log([0.5, 0.3, 0.1])
    st = standing_top_k(row, np.array([3, 7, 1]), 7)
    assert st.rank == 2 and st.p == pytest.approx(0.3) and st.logit is None and st.top_k == 3
    out = standing_top_k(row, np.array([3, 7, 1]), 5)
    assert out.rank is None and out.p is None and out.below == pytest.approx(0.1)


def test_parse_takes_the_text_after_one_space():
    assert slash.parse("/force  Paris") == ("/force", " Paris")
    assert slash.parse("/p #28") == ("/p", "#28")
    assert slash.parse("/p") == ("/p", "")
    assert slash.parse("/paris") is None and slash.parse("/system x") is None


@run_async
async def test_force_and_lookup_from_the_chat_box(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "What is the capital of France?")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "a step")
        eng = app.worker.engine
        paris = eng.vocab.tokenize(" Paris", add_special=False)[0]
        logits = eng.logits.copy()
        want = int(np.count_nonzero(logits > logits[paris])) + 1

        await chat(pilot, app, "/p Paris")  # no leading space: ' Paris' is given too
        v = app.view
        assert v.notice_level == "info", v.notice
        assert f"(id {paris}) at rank {want:,} of {eng.info.n_vocab:,}" in v.notice, v.notice
        assert "'Paris'" in v.notice and "logit" in v.notice
        assert app.view.text.reply_tokens == 1  # a lookup decodes nothing

        await chat(pilot, app, "/force Paris is")  # two tokens: refused, the pieces listed
        v = app.view
        assert v.notice_level == "error" and "2 tokens" in v.notice and "/force #ID" in v.notice
        assert "'Paris'" in v.notice and app.view.text.reply_tokens == 1

        await chat(pilot, app, "/force  Paris")  # two spaces: the text ' Paris'
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "the forced step")
        assert app.view.text.tokens[-1] == paris
        assert "Forced ' Paris'" in app.view.notice and f"rank {want:,}" in app.view.notice

        await chat(pilot, app, "/force #28")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 3, "the forced id")
        assert app.view.text.tokens[-1] == 28

        await chat(pilot, app, f"/force #{eng.info.n_vocab}")
        assert "outside the vocabulary" in app.view.notice and app.view.text.reply_tokens == 3


@run_async
async def test_lookup_over_http_says_outside_the_top_k(llama_server, tmp_path):  # noqa: F811
    backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0), n_probs=5)
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        top = backend.records[backend.logits_record].server.top_ids
        second = top[1]
        await chat(pilot, app, f"/p #{second}")
        assert "rank 2 of the top 5 the server sent" in app.view.notice, app.view.notice
        outside = next(t for t in range(100, 200) if t not in top)
        await chat(pilot, app, f"/p #{outside}")
        assert "outside the top 5 the server sent" in app.view.notice, app.view.notice
