"""Messages that name the real cause and the way out: a system prompt longer than the context is
named with its own token count (a new chat would not help), and a user's ``--chat-template
FILE`` is called by its file, not "the model's chat template"."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.worker import make_worker, wait  # noqa: F401  (the fixture)
from tui.engine.model.chat_template import template_from
from tui.worker import Worker

SYSTEM = "Answer in French and never in English. " * 7_700  # 300,300 characters


def test_a_system_prompt_longer_than_the_context_is_named(make_worker):  # noqa: F811
    c = make_worker()
    n_sys = len(c.engine.vocab.tokenize(SYSTEM.strip(), add_special=False))  # llama_tokenize's
    assert n_sys > 50_000
    c.set_system_prompt(SYSTEM)
    v = wait(c, lambda v: "System prompt set" in v.notice, "/system")
    assert v.notice_level == "warn"
    assert f"{len(SYSTEM.strip()):,} characters, {n_sys:,} tokens" in v.notice
    assert "longer than the whole context (512 tokens)" in v.notice and "/system" in v.notice
    c.send("Hello")
    v = wait(c, lambda v: v.notice_level == "error", "the refusal")
    assert "ctrl+n" not in v.notice, v.notice  # a new chat has the same system prompt
    assert v.notice.startswith(f"The system prompt alone is {n_sys:,} tokens"), v.notice
    assert "context holds 512" in v.notice and "shorten it with /system" in v.notice
    assert v.header.returned_text == "Hello"  # the message goes back to the chat box
    c.set_system_prompt("Be brief.")  # shortened: the same message is sent
    wait(c, lambda v: "System prompt set (9 characters)" in v.notice, "the short prompt")
    c.send("Hello")
    v = wait(c, lambda v: v.action == "send", "the prefill")
    assert v.notice_level != "error", v.notice


def test_a_message_longer_than_the_context_is_named(make_worker):  # noqa: F811
    c = make_worker()
    long = "the waves rolled in and " * 400
    n = len(c.engine.vocab.tokenize(long, add_special=False))
    c.send(long)
    v = wait(c, lambda v: v.notice_level == "error", "the refusal")
    assert v.notice.startswith(f"This message alone is {n:,} tokens"), v.notice
    assert "ctrl+n" not in v.notice


def test_a_long_conversation_still_points_to_a_new_chat(make_worker):  # noqa: F811
    c = make_worker()
    c.send("the waves rolled in and " * 60)  # about 360 tokens: it fits
    wait(c, lambda v: v.action == "send", "the first prefill")
    c.send("more " * 200)  # fits a new chat, not this one
    v = wait(c, lambda v: v.notice_level == "error", "the refusal")
    assert "The conversation would need" in v.notice and "ctrl+n for a new chat" in v.notice


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{% for m in messages %}{{ m.content }", "is broken: unexpected '}'."),
        ("{{ raise_exception('roles must alternate') }}", "raised an error: roles must alternate."),
        ("hello", "dropped a message; it cannot be used."),
    ],
)
def test_a_users_chat_template_is_called_by_its_file(make_engine, tmp_path: Path, template, needle):
    path = tmp_path / "mine.jinja"
    path.write_text(template)
    engine = make_engine()
    # As ``tokenstep --chat-template FILE`` does (tui.trace_cli.engine_from_args).
    engine.info = dataclasses.replace(engine.info, chat_template=template_from(str(path)))
    c = Worker(engine, autosave_dir=tmp_path / "autosave", close_engine=False)
    c.start()
    try:
        c.send("Hi")
        v = wait(c, lambda v: v.notice_level == "error", "the refusal")
    finally:
        assert c.stop()
    assert v.notice == f"The chat template in {path} (--chat-template) {needle}", v.notice
    assert v.header.returned_text == "Hi"
