"""``/tokenize TEXT`` in the chat box (issue 24): the tokens in the notice, nothing sent; the
ids are llama-cpp-python's ``Llama.tokenize`` of the same text."""

from __future__ import annotations

import re

from llama_cpp import Llama

from tests.support.app import SIZE, make_app, run_async, wait_for

TEXT = "The cat sat  on\u00a0the mat"


@run_async
async def test_slash_tokenize_shows_tokens_without_sending(make_engine, model_path, tmp_path):
    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    want = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    llm.close()
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view is not None, "the first view")
        chat = app.query_one("#chat")
        chat.value = "/tokenize " + TEXT  # Pilot cannot type U+00A0 as a key
        await pilot.press("enter")
        await wait_for(pilot, lambda: "/tokenize, not sent" in app.view.notice, "the notice")
        notice = app.view.notice
        assert f"{len(want)} token(s)" in notice
        assert [int(i) for i in re.findall(r"·(\d+)", notice)] == want
        assert "␣cat·" in notice and "\\xa0·" in notice  # U+00A0 visible, never a blank
        assert app.view.text.n_past == 0 and not app.view.text.messages  # nothing sent
        assert chat.value == ""
        await pilot.press(*"/tokenize", "enter")
        await wait_for(pilot, lambda: "without sending it" in app.view.notice, "the hint")
