"""The OpenAI-compatible backend against llama-cpp-python's own server (``python -m
llama_cpp.server``): an implementation independent of llama-server that takes text prompts only
and answers in OpenAI's legacy form (token texts, not ids). Oracles: the local engine's logits
and tokenizer on the same GGUF."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support.openai_servers import llama_cpp_server  # noqa: F401  (the session fixture)
from tui.engine import SamplerSettings, default_model_path
from tui.engine.model.errors import TokenstepError
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.run import loop
from tui.engine.sampler.sampling import softmax
from tui.engine.wire.openai_api import detect_api


@pytest.fixture
def text_server(llama_cpp_server):  # noqa: F811
    made: list[OpenAIBackend] = []

    def make(settings: SamplerSettings | None = None, **kw) -> OpenAIBackend:
        b = OpenAIBackend(
            llama_cpp_server.url,
            settings or SamplerSettings(temp=0.0),
            local_vocab=LocalVocab(default_model_path()),
            **kw,
        )
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def test_it_is_detected_as_openai_and_takes_text_only(llama_cpp_server, text_server):  # noqa: F811
    assert detect_api(llama_cpp_server.url) == "openai"
    b = text_server()
    assert not b.ids_prompt
    assert b.info.n_vocab == 49152 and b.info.chat_template


def test_without_a_vocabulary_it_is_one_sentence(llama_cpp_server):  # noqa: F811
    with pytest.raises(Exception, match=r"give the GGUF it serves with -m PATH") as got:
        OpenAIBackend(llama_cpp_server.url, SamplerSettings(temp=0.0))
    assert "\n" not in str(got.value)


def test_token_texts_map_to_the_local_engine_s_top_ids(make_engine, text_server):
    """Every candidate text that names one id lands on the id and logprob the local engine's
    logits give (llama-cpp-python computes them from the same llama.cpp on the same file)."""
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    b = text_server(n_probs=10)
    for text in ("The capital of France is", "def fibonacci(n):"):
        toks = eng.vocab.tokenize(text, add_special=True)
        eng.reset()
        b.reset()
        eng.prefill(toks)
        b.prefill(toks)
        step = b.records[b.logits_record].server
        assert "takes text only" not in (step.warning or "")  # the text gives back our ids
        assert not step.server_timings  # llama-cpp-python reports none: round trip only
        logp = np.log(softmax(eng.logits).astype(np.float64))
        best = np.argsort(-eng.logits)[:10].tolist()
        assert step.top_ids[:3] == best[:3]
        exact = 0
        for tok, lp in zip(step.top_ids, step.top_logprobs, strict=True):
            if not b._index.to_id(eng.vocab.piece(tok).decode("utf-8", "ignore"))[1]:
                continue  # a text that names several ids (marked in the warning)
            exact += 1
            assert tok in best
            assert abs(lp - logp[tok]) < 2e-3, (text, tok)
        assert exact >= 8
        if exact == len(step.top_ids):
            assert step.warning is None
            assert math.isclose(step.mass, float(np.exp(logp[best]).sum()), abs_tol=5e-3)
        else:
            assert "do not name one token id" in step.warning


def test_greedy_ids_over_text_equal_the_local_engine_where_the_text_round_trips(
    make_engine, text_server
):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    b = text_server()
    toks = eng.vocab.tokenize("Once upon a time", add_special=True)
    local = [rec.sampled for rec in loop.generate(eng, 6, toks)]
    over_text = [rec.sampled for rec in loop.generate(b, 6, toks)]
    assert all("takes text only" not in (r.server.warning or "") for r in b.records)
    assert over_text == local


def test_a_prefix_the_server_tokenizes_otherwise_is_said(text_server):
    """Two newline tokens (198, 198) are the text "\\n\\n", which llama.cpp's tokenizer writes
    as one token: the server sees another prefix than tokenstep holds, and the step says so."""
    b = text_server()
    nl = b.vocab.tokenize("\n", add_special=False)
    assert len(nl) == 1 and len(b.vocab.tokenize("\n\n", add_special=False)) == 1
    toks = b.vocab.tokenize("Hello", add_special=True) + nl + nl
    b.prefill(toks)
    warning = b.records[-1].server.warning
    assert warning is not None and "takes text only" in warning
    assert f"tokenstep holds {len(toks)} ids" in warning
    assert b.records[-1].server.to_dict()["warning"] == warning


def test_texts_that_name_several_ids_are_marked(text_server):
    """llama-cpp-python writes a candidate as its text with errors='ignore': a token holding
    part of a UTF-8 character, or a control token, is "" or collides with another; such a text
    is marked, never silently taken for one id."""
    b = text_server(n_probs=20)
    index_ready = False
    for text in ("日本語の文章:", "Emoji: 🙂", "<|im_start|>user\nhi<|im_end|>\n"):
        b.reset()
        b.prefill(b.vocab.tokenize(text, add_special=True, parse_special=True))
        step = b.records[-1].server
        index_ready = True
        if step.warning and "do not name one token id" in step.warning:
            break
    assert index_ready and step.warning and "do not name one token id" in step.warning
    assert b._index is not None
    for tok in step.top_ids:  # every id kept is inside the vocabulary, each once
        assert 0 <= tok < b.info.n_vocab
    assert len(set(step.top_ids)) == len(step.top_ids)


def test_the_server_s_own_pick_in_the_legacy_form_maps_to_an_id(text_server):
    """--pick server: the sample's text (``logprobs.tokens[0]``) becomes the id tokenstep
    feeds; one seed gives one pick."""
    picks = []
    for _ in range(2):
        b = text_server(SamplerSettings(temp=0.8, seed=11), pick="server")
        b.prefill(b.vocab.tokenize("Once upon a time", add_special=True))
        token = b.sample().token
        step = b.records[b.logits_record].server
        assert step.server_pick == token and 0 <= token < b.info.n_vocab
        assert step.to_dict()["pick"] == "server"
        picks.append(token)
    assert picks[0] == picks[1]


def test_another_model_s_file_is_one_sentence(llama_cpp_server, tmp_path):  # noqa: F811
    """A text-only server has no /tokenize: the -m file is checked by the server's own count
    of a probe text (``usage.prompt_tokens``). A byte-level 259-token vocabulary counts it
    otherwise than SmolLM2's."""
    from tests.support.swa_model import write_swa_model

    other = write_swa_model(tmp_path / "other.gguf")
    with pytest.raises(TokenstepError) as got:
        OpenAIBackend(llama_cpp_server.url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(other))
    text = str(got.value)
    assert "is not the model the server at" in text and "probe text is" in text
    assert "\n" not in text
