"""Replies no real llama-server can be made to send: a wrong type, an id outside the vocabulary, a
logprob of 1e30, a 20 MB body, one byte a second (:mod:`tests.scripted_server`). The real command
line runs against each: one sentence naming the field, a non-zero exit, no traceback, no NumPy
warning, bounded time and memory; through the worker, the conversation is kept and → retries."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support.scripted_server import Mutation, one_sentence, run_measured, scripted  # noqa: F401  (the fixture)
from tests.support.worker import wait
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.wire.remote_http import ServerError
from tui.worker import Worker


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(body: Any) -> Any:
        obj = body
        for key in path[:-1]:
            obj = obj[key]
        if value is _DELETE:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
        return body

    return mutate


class _Delete:
    """The field is taken out of the reply (a stable name, so test ids are the same in every
    process: pytest-xdist's workers must collect the same ids)."""

    def __repr__(self) -> str:
        return "deleted"


_DELETE = _Delete()
TOP_LP = ("completion_probabilities", 0, "top_logprobs")

CASES = [  # (endpoint, where in the reply, the bad value, what the sentence must say)
    (
        "/props",
        ("default_generation_settings", "n_ctx"),
        "abc",
        "/props with default_generation_settings.n_ctx 'abc', not a whole number",
    ),
    ("/props", ("total_slots",), "many", "/props with total_slots 'many', not a whole number"),
    ("/props", ("total_slots",), {}, "/props with total_slots an object, not a whole number"),
    (
        "/props",
        ("default_generation_settings",),
        [1],
        "/props with default_generation_settings a list, not an object",
    ),
    (
        "/props",
        ("eos_token",),
        "x" * 5_000_000,
        "/props with eos_token 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'…, longer than",
    ),
    (
        "/v1/models",
        ("data", 0, "meta", "n_vocab"),
        "lots",
        "/v1/models with data[0].meta.n_vocab 'lots', not a whole number",
    ),
    (
        "/v1/models",
        ("data", 0, "meta", "n_vocab"),
        1e10,
        "/v1/models with data[0].meta.n_vocab 10000000000.0, not a whole number",
    ),
    (
        "/v1/models",
        ("data", 0, "meta", "n_vocab"),
        10**10,
        "/v1/models with data[0].meta.n_vocab 10000000000, outside 1..4,194,304",
    ),
    ("/tokenize", ("tokens", 0, "id"), "72", "/tokenize with tokens[0].id '72', not a token id"),
    (
        "/tokenize",
        ("tokens", 0, "id"),
        10**9,
        "/tokenize with tokens[0].id 1000000000, outside the vocabulary (0..255)",
    ),
    (
        "/completion",
        (*TOP_LP, 1, "id"),
        10**9,
        "top_logprobs[1].id 1000000000, outside the vocabulary (0..255)",
    ),
    ("/completion", (*TOP_LP, 1, "id"), "abc", "top_logprobs[1].id 'abc', not a token id"),
    (
        "/completion",
        (*TOP_LP, 1, "id"),
        _DELETE,
        "without completion_probabilities[0].top_logprobs[1].id",
    ),
    (
        "/completion",
        (*TOP_LP, 2, "logprob"),
        "high",
        "top_logprobs[2].logprob 'high', not a log-probability",
    ),
    (
        "/completion",
        (*TOP_LP, 2, "logprob"),
        1e30,
        "top_logprobs[2].logprob 1e+30, not a log-probability",
    ),
    (
        "/completion",
        (*TOP_LP, 2, "logprob"),
        math.inf,
        "top_logprobs[2].logprob Infinity, not a log-probability",
    ),
    ("/props", ("model_path",), "\ud800.gguf", None),  # a lone surrogate: shown as U+FFFD
    ("/props", ("eos_token",), "\udcff", None),
    ("/completion", (*TOP_LP, 0, "logprob"), -1e300, None),  # log(0) is fine: no warning, exit 0
    (
        "/completion",
        ("timings", "cache_n"),
        "x",
        "/completion with timings.cache_n 'x', not a whole number",
    ),
    ("/completion", (*TOP_LP, 3, "id"), ord("e"), "top_logprobs[3].id 101, listed twice"),
]


@pytest.mark.parametrize(("path", "where", "value", "said"), CASES, ids=lambda x: str(x)[:24])
def test_a_bad_field_in_a_reply_is_one_sentence_that_names_it(
    scripted,  # noqa: F811
    path,
    where,
    value,
    said,
):
    scripted.mutations[path] = _set(where, value)
    if said is None:
        code, err, _s, _mb = run_measured("trace", "--server", scripted.url, "-p", "Hi", "-n", "2")
        assert code == 0 and err == "", err
        return
    err, seconds, mb = one_sentence(scripted)
    assert err.startswith(f"tokenstep: the llama-server at {scripted.url} sent "), err
    assert said in err, err
    assert 0 < mb < 250, f"{mb:.0f} MB peak"  # the 1e10 vocabulary was a 112 GiB row


def test_a_reply_past_the_size_cap_is_refused_unread(
    scripted,  # noqa: F811
):
    scripted.mutations["/props"] = lambda body: {**body, "chat_template": "x" * (20 * 2**20)}
    err, _seconds, mb = one_sentence(scripted)
    assert "sent a /props reply longer than 16 MiB, more than tokenstep reads of one reply" in err
    assert 0 < mb < 250, f"{mb:.0f} MB peak"


def test_more_tokens_than_the_text_has_bytes_is_one_sentence(
    scripted,  # noqa: F811
):
    scripted.mutations["/tokenize"] = lambda body: {"tokens": [{"id": 1, "piece": "a"}] * 10**5}
    err, _s, mb = one_sentence(scripted)
    assert "sent /tokenize with tokens a list, 100,000 long, more than the " in err
    assert 0 < mb < 250, f"{mb:.0f} MB peak"


def test_a_reply_that_is_not_json_or_nests_too_deep_is_one_sentence(
    scripted,  # noqa: F811
):
    scripted.mutations["/v1/models"] = lambda body: b"[" * 100_000 + b"]" * 100_000
    err, _s, _mb = one_sentence(scripted)
    assert "answered GET /v1/models with something that is not JSON" in err


def test_a_server_that_sends_one_byte_a_second_times_out_on_the_whole_request(
    scripted,  # noqa: F811
):
    """A socket timeout bounds each read; one byte a second never trips it. --timeout bounds
    the whole request: the trace ends within it (plus start-up), with one sentence."""
    scripted.trickle = "/props"
    err, seconds, _mb = one_sentence(scripted, "--timeout", "2")
    assert "did not answer /props within 2 s" in err
    assert seconds < 2 + 30, seconds  # the trickle would go on for 60 s


def test_timeout_flag_is_checked():
    code, err, _s, _mb = run_measured("trace", "--server", "http://127.0.0.1:1", "--timeout", "0")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "--timeout: '0': use a number of seconds above 0, at most 86400" in err


def test_a_bad_reply_mid_conversation_keeps_it_and_arrow_retries(
    scripted,  # noqa: F811
    tmp_path,
):
    """Through the real worker: a /completion with an id outside the vocabulary, then one that
    trickles past the deadline, each one notice; the conversation is as it was and → (a step)
    carries on once the server answers properly."""
    backend = RemoteBackend(scripted.url, SamplerSettings(temp=0.0), timeout=2.0)
    w = Worker(backend, autoplay=False, autosave_dir=tmp_path / "autosave")
    w.start()
    try:
        w.send("Hello")
        v = wait(w, lambda v: v.activity == "generating", "the prefill")
        n0 = len(v.text.tokens)
        w.step()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 1, "one step")
        kept, text = v.text.tokens, v.text
        scripted.mutations["/completion"] = _set((*TOP_LP, 0, "id"), 10**9)
        w.step()
        v = wait(w, lambda v: v.notice_level == "error", "the refusal")
        assert "top_logprobs[0].id 1000000000, outside the vocabulary (0..255)" in v.notice
        assert "The conversation is kept; press → to retry." in v.notice
        assert v.text.tokens == kept
        scripted.mutations.clear()
        scripted.trickle = "/completion"
        w.step()
        v = wait(w, lambda v: "did not answer /completion within 2 s" in v.notice, "the deadline")
        assert v.text.tokens == kept and "press → to retry" in v.notice
        scripted.trickle = None
        w.step()  # →
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 2, "the retried step")
        assert v.text.tokens[: n0 + 1] == kept and v.notice_level != "error"
        assert text.n_ctx == v.text.n_ctx
    finally:
        assert w.stop()
    assert w.error is None, w.error


def test_a_bad_reply_leaves_the_backend_as_it_was(
    scripted,  # noqa: F811
):
    """The engine seam: a refused /completion changes nothing (tokens, records, cache state)."""
    r = RemoteBackend(scripted.url, SamplerSettings(temp=0.0))
    try:
        r.sync_prompt(r.vocab.tokenize("Hi"))
        before = (list(r.tokens), len(r.records), r.logits_record, list(r._sent))
        scripted.mutations["/completion"] = _set((*TOP_LP, 1, "logprob"), 1e30)
        with pytest.raises(ServerError, match="logprob 1e\\+30, not a log-probability") as info:
            r.feed(ord("e"))
        assert info.value.retry
        assert (list(r.tokens), len(r.records), r.logits_record, list(r._sent)) == before
    finally:
        r.close()


def test_serve_reads_the_slot_count_through_the_same_checks(
    scripted,  # noqa: F811
):
    """``tokenstep serve --server`` asks /props for the slot count before it listens."""
    from tests.support.llama_server import free_port

    scripted.mutations["/props"] = _set(("total_slots",), "many")
    code, err, _s, _mb = run_measured(
        "serve", "--server", scripted.url, "--port", str(free_port()), timeout=60
    )
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert "sent /props with total_slots 'many', not a whole number." in err
