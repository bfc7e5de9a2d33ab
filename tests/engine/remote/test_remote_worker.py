"""The decode worker (no screen) driving a real llama-server: every command either works as
locally or is refused in the capability's own sentence; the views never show local-only data."""

from __future__ import annotations

from tests.support.llama_server import llama_server  # noqa: F401
from tests.support.worker import wait
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.worker import Worker
from tui.worker.session_store import read_session


def test_the_worker_steps_a_server_and_refuses_what_needs_a_local_model(
    llama_server,  # noqa: F811
    tmp_path,
):
    backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0))
    w = Worker(backend, autoplay=False, autosave_dir=tmp_path / "autosave")
    w.start()
    try:
        w.send("Say hello.")
        v = wait(w, lambda v: v.activity == "generating", "the prefill")
        n0 = len(v.text.tokens)
        assert v.capabilities.kv_cells is False and v.kv.kv_cells == () and v.cache.memory is None
        for _ in range(3):
            w.step()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 3, "three steps")
        assert v.logits.candidates and v.text.last_pick is not None
        w.rewind(1)
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 2, "the rewind")
        w.force(v.logits.candidates[1].id)
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 3, "the forced token")
        assert v.text.tokens[-1] == v.text.last_pick.id and v.text.last_pick.forced
        w.adjust("temp", 1)
        w.toggle_greedy()
        w.next_seed()
        w.step()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 4, "a step after the sampler keys")
        for refused, what in ((w.fork, "fork"), (w.verify, "verify")):
            refused()
            v = wait(w, lambda v, what=what: v.notice.startswith(what.capitalize()), what)
            assert "needs a local model: this one runs on the server at" in v.notice
        w.attention_cmd("toggle")
        v = wait(w, lambda v: "attention" in v.notice.lower(), "the attention refusal")
        assert "needs a local model" in v.notice
        path = tmp_path / "remote.jsonl"
        w.save(str(path))
        wait(w, lambda v: v.header.last_saved == str(path), "the save")
        header, records = read_session(path)
        assert records and all("server" in r for r in records)
        assert all("logprob" in r["top"][0] for r in records if "top" in r)
    finally:
        assert w.stop()
    assert w.error is None, w.error


def test_a_message_the_server_could_not_take_goes_back_to_the_chat_box(tmp_path):
    from tests.support.llama_server import free_port, start_server

    port = free_port()
    server = start_server(tmp_path, port=port)
    w = Worker(RemoteBackend(server.url, SamplerSettings(temp=0.0)), autoplay=False)
    w.start()
    try:
        server.stop()
        w.send("Hello there.")
        v = wait(w, lambda v: v.notice_level == "error", "the error")
        assert "Enter sends it again" in v.notice and v.header.returned_text == "Hello there."
        assert v.text.tokens == ()
        server = start_server(tmp_path, port=port)
        w.send("Hello there.")
        wait(w, lambda v: v.activity == "generating", "the prefill after the retry")
    finally:
        assert w.stop()
        server.stop()
    assert w.error is None, w.error


def test_a_reply_that_fills_the_servers_slot_ends_as_context_full(tmp_path):
    """llama-server refuses a prompt that fills its slot (it keeps one position to predict
    into), so the reply ends at n_ctx - 1 tokens with the same notice as locally, instead of an
    autoplay that asks again and again."""
    from tests.support.llama_server import start_server

    server = start_server(tmp_path, extra=("-c", "64", "-np", "1"))  # later flags win: a small slot
    w = Worker(RemoteBackend(server.url, SamplerSettings(temp=0.0)), autoplay=True)
    w.start()
    try:
        w.send("Write a long story about the sea, with many chapters.")
        v = wait(w, lambda v: v.activity == "done", "the reply to end")
        n_ctx = w.engine.n_ctx  # the server's slot (it pads -c 64 to 256 here)
        assert len(v.text.tokens) == n_ctx - 1
        assert v.notice.startswith(f"Context full ({n_ctx} tokens)") and v.notice_level == "warn"
        assert w.engine.stop_reason == "context full"
    finally:
        assert w.stop()
        server.stop()
    assert w.error is None, w.error
