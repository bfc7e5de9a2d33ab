"""The decode worker on its own (no screen): queueing, autosave, refusals, rewind limits."""

from __future__ import annotations

from tests.support.worker import make_worker, wait  # noqa: F401 (fixtures)
from tui.worker.sampler_keys import TEMP_LADDER, TOP_K_LADDER, next_rung
from tui.worker.session_store import read_session


def test_ladders_move_one_rung_and_stop_at_the_ends():
    assert next_rung(TEMP_LADDER, 0.8, 1) == 0.9
    assert next_rung(TEMP_LADDER, 0.8, -1) == 0.7
    assert next_rung(TEMP_LADDER, 0.0, -1) == 0.0
    assert next_rung(TOP_K_LADDER, 40, 1) == 50
    assert next_rung(TOP_K_LADDER, 7, -1) == 5  # between rungs: the next one down
    assert next_rung(TOP_K_LADDER, 200, 1) == 200


def test_a_finished_turn_is_autosaved_where_the_view_says(make_worker):  # noqa: F811
    c = make_worker(autoplay=True)
    c.send("Hi")
    v = wait(c, lambda v: v.activity == "done", "the reply to end")
    assert v.stop_reason == "end of generation"
    assert v.header.last_saved == v.header.autosave_path == str(c.autosave_path)
    header, records = read_session(v.header.last_saved)
    assert [m["role"] for m in header["conversation"]] == ["user", "assistant"]
    reply = header["conversation"][1]["content"]
    assert reply and reply == v.text.messages[-1].content
    assert len(records) == v.header.n_records
    assert records[-1]["eog"] is True  # the last record's pick was the end token
    assert header["context_tokens"] == list(v.text.tokens)


def test_enter_while_a_reply_plays_is_queued_then_sent(make_worker):  # noqa: F811
    c = make_worker(autoplay=True)
    c.send("Hi")
    c.send("And again?")  # handled right after the prefill, while the reply plays
    v = wait(c, lambda v: v.header.queued is not None, "the message to be queued")
    assert v.header.queued == "And again?" and "Queued" in v.notice
    v = wait(c, lambda v: len(v.text.messages) >= 3 and v.header.queued is None, "the queued send", 180)
    c.pause()
    assert [m.role for m in v.text.messages[:3]] == ["user", "assistant", "user"]
    assert v.text.messages[2].content == "And again?"


def test_enter_in_step_mode_cuts_the_reply_and_sends(make_worker):  # noqa: F811
    c = make_worker(autoplay=False)
    c.send("Hi")
    c.step()
    c.step()
    wait(c, lambda v: v.text.reply_tokens == 2, "two steps")
    c.send("Go on.")
    v = wait(c, lambda v: len(v.text.messages) == 3, "the second message")
    assert v.text.messages[1].role == "assistant" and v.text.messages[2].content == "Go on."
    assert "cut" in v.notice
    assert v.text.tokenized is not None and v.text.tokenized.reused > 0  # the prefix stayed cached


def test_rewind_stops_at_the_users_message(make_worker):  # noqa: F811
    c = make_worker(autoplay=False)
    c.send("Hi")
    c.step()
    wait(c, lambda v: v.text.reply_tokens == 1, "one step")
    c.rewind(5)
    v = wait(c, lambda v: v.action == "rewind", "the rewind")
    assert v.text.reply_tokens == 0
    c.rewind(1)
    v = wait(c, lambda v: "Nothing to rewind" in v.notice, "the refusal")
    assert v.text.reply_tokens == 0 and v.text.n_past == v.text.reply_start


def test_a_message_that_does_not_fit_is_refused_and_handed_back(make_worker):  # noqa: F811
    c = make_worker(autoplay=False, n_ctx=64)
    text = "tell me " * 40
    c.send(text)
    v = wait(c, lambda v: v.notice_level == "error", "the refusal")
    assert "context holds 64" in v.notice
    assert v.header.returned_text == text  # the chat box gets it back: nothing is lost
    assert v.text.n_past == 0 and not v.text.messages


def test_stepping_before_any_message_says_what_to_do(make_worker):  # noqa: F811
    c = make_worker()
    c.step()
    v = wait(c, lambda v: v.notice_level == "warn", "the hint")
    assert "Send a message first" in v.notice
