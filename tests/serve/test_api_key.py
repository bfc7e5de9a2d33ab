"""The API key never leaves tokenstep (issue 37, items 1 to 4): after each case, every output
channel is grepped for it: stdout, stderr, crash files, saved sessions, traces, a served tab's
command line, the app's notice and screen.

A real server cannot be made to echo the request's ``Authorization`` header into its error
text, so the scripted ``openai_servers.Fake`` does (``fake.echo``)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.app import SIZE, run_async, send, wait_for
from tests.support.cli import run_cli
from tests.support.openai_servers import fake  # noqa: F401  (the fixture)
from tests.support.remote import remote_screen_text
from tui.app import TokenstepApp
from tui.args import build_parsers
from tui.crash import CrashLog, shown_argv
from tui.engine import SamplerSettings, default_model_path
from tui.engine.model import secret
from tui.engine.model.errors import TokenstepError
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.serve_remote import without_api_key
from tui.worker import session_store
from tui.worker.state import State

KEY = "sk-issue37-Zq9xW4-SECRET"


@pytest.fixture(autouse=True)
def _no_key_known():
    """Each test learns its own keys; none leaks into the next."""
    secret.forget()
    yield
    secret.forget()


def clean(proc, *keys: str) -> str:
    """Neither stdout nor stderr holds any of ``keys`` (nor a traceback); returns stderr."""
    out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    for k in keys:
        assert k not in out and k not in err, (k, out[-500:], err)
    assert "Traceback" not in err, err
    return err


def one_sentence(proc, *keys: str) -> str:
    err = clean(proc, *keys)
    assert proc.returncode == 1, (proc.returncode, err)
    assert err.startswith("tokenstep: ") and err.count("\n") == 1, err
    return err


def trace_args(url: str, *extra: str) -> list[str]:
    model = str(default_model_path())
    return ["trace", "--server", url, "--api", "openai", "-m", model, "-p", "x", "-n", "1", *extra]


# -- 1. a server's error text quotes the key -------------------------------------------------


@pytest.mark.parametrize("status", [400, 500])
def test_an_error_body_that_quotes_the_header_is_masked(fake, status):  # noqa: F811
    fake.status = status
    fake.echo = "bad request; your header was {auth}"
    err = one_sentence(run_cli(*trace_args(fake.url, "--api-key", KEY)), KEY)
    assert f"(HTTP {status})" in err and "your header was ***" in err, err
    assert fake.seen_auth and all(a == f"Bearer {KEY}" for a in fake.seen_auth)


def test_the_key_from_the_environment_and_a_body_that_is_only_the_key(fake):  # noqa: F811
    fake.status = 400
    fake.echo = KEY  # not even the Bearer form: the key alone
    proc = run_cli(*trace_args(fake.url), env={"OPENAI_API_KEY": KEY})
    err = one_sentence(proc, KEY)
    assert "(HTTP 400): ***." in err, err


def test_a_long_body_is_masked_before_it_is_cut(fake):  # noqa: F811
    fake.status = 500
    fake.echo = "x" * 290 + " {auth}"  # the cut at 300 characters falls inside the key
    err = one_sentence(run_cli(*trace_args(fake.url, f"--api-key={KEY}")), KEY, KEY[:8])
    assert "***" in err


@run_async
async def test_the_app_screen_and_its_autosave_never_show_it(fake, tmp_path):  # noqa: F811
    """The app over a server that echoes the header into its 400: the notice on screen,
    the whole screen and the autosave hold no key."""
    secret.add(KEY)
    backend = OpenAIBackend(
        fake.url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(default_model_path()),
        api_key=KEY,
    )
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        fake.status, fake.echo = 400, "bad request; your header was {auth}"
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.notice_level == "error", "the 400 sentence")
        assert "HTTP 400" in app.view.notice and "your header was ***" in app.view.notice
        assert KEY not in remote_screen_text(app)
        await pilot.press("ctrl+s")
        await pilot.pause()
    saved = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert saved
    for p in saved:
        assert KEY.encode() not in p.read_bytes(), p


def test_the_notice_and_the_screen_never_show_it(fake, tmp_path):  # noqa: F811
    """The worker's notice line (what the app's status line draws) masks a server's echo."""
    secret.add(KEY)
    backend = OpenAIBackend(
        fake.url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(default_model_path()),
        api_key=KEY,
    )
    try:
        fake.status, fake.echo = 400, "your header was {auth}"
        with pytest.raises(TokenstepError) as info:
            backend.prefill(backend.vocab.tokenize("Hello", add_special=True))
        assert KEY not in str(info.value) and "***" in str(info.value)
        state = State()
        state.note(f"The server said: Bearer {KEY}", "error")
        assert KEY not in state.notice and state.notice == "The server said: ***"
    finally:
        backend.close()


# -- 2. an abbreviated option ------------------------------------------------------------------


def test_no_parser_takes_an_abbreviation():
    for name, parser in build_parsers().items():
        assert parser.allow_abbrev is False, name
    proc = run_cli("trace", "--server", "http://127.0.0.1:9", "--api-k", KEY, "-p", "x")
    err = one_sentence(proc, KEY)
    assert "unrecognized arguments: --api-k ***" in err, err


def test_an_abbreviation_reaches_no_crash_file_and_no_tab(tmp_path, monkeypatch):
    argv = ["tokenstep", "--server", "http://h:1", "--api-k", KEY]
    assert KEY not in " ".join(shown_argv(argv))
    monkeypatch.setattr(sys, "argv", [*argv, f"--api-key={KEY}x"])
    log = CrashLog(tmp_path)
    assert log.install(f"about: Bearer {KEY}")
    try:
        text = log.path.read_text(encoding="utf-8")
    finally:
        log.close()
    assert KEY not in text and "--api-k ***" in text and "--api-key=***" in text, text
    for spelling in (["--api-key", KEY], [f"--api-key={KEY}"], ["--api-k", KEY], [f"--api-ke={KEY}"]):
        tab_argv, env = without_api_key(["--server", "http://h:1", *spelling, "-m", "x.gguf"])
        assert tab_argv == ["--server", "http://h:1", "-m", "x.gguf"], spelling
        assert env == {"OPENAI_API_KEY": KEY}


def test_serve_with_an_abbreviation_is_refused_without_the_key():
    proc = run_cli("serve", "--port", "1", "--server", "http://127.0.0.1:9", "--api-k", KEY)
    one_sentence(proc, KEY)


# -- 3. a key no header can carry ----------------------------------------------------------------


@pytest.mark.parametrize(
    "key,why",
    [(f"{KEY}\r\nX-Evil: 1", "line break"), (f"{KEY}-ключ", "outside Latin-1")],
    ids=["crlf", "non-latin-1"],
)
@pytest.mark.parametrize("where", ["flag", "env", "app"])
def test_a_key_no_header_can_carry_is_one_sentence_that_does_not_repeat_it(
    fake, key, why, where  # noqa: F811
):
    args = trace_args(fake.url) if where != "app" else ["--server", fake.url, "--api", "openai"]
    env = None
    if where == "env":
        env = {"OPENAI_API_KEY": key}
    else:
        args += ["--api-key", key]
    err = one_sentence(run_cli(*args, env=env), KEY, "X-Evil", "ключ")
    assert why in err and "HTTP header" in err, err
    assert fake.seen_auth == []  # refused before any request


# -- 4. a command that does not take --api-key -----------------------------------------------------


@pytest.mark.parametrize("cmd", ["info", "tokenize", "verify"])
def test_a_command_without_the_flag_does_not_echo_the_key(cmd):
    proc = run_cli(cmd, "--server", "http://127.0.0.1:9", "--api-key", KEY, "-p", "x")
    err = one_sentence(proc, KEY)
    if cmd != "verify":  # verify knows the flag, to refuse --server in its own sentence
        assert "unrecognized arguments" in err and "***" in err, err


# -- the written channels: sessions and traces -------------------------------------------------------


def test_sessions_and_traces_are_masked(tmp_path):
    secret.add(KEY)
    rows = [{"tokenstep_session": 1, "conversation": [{"role": "user", "content": f"k={KEY}"}]}]
    path = session_store.write_jsonl_atomic(tmp_path / "s.jsonl", rows)
    text = path.read_text(encoding="utf-8")
    assert KEY not in text and json.loads(text)["conversation"][0]["content"] == "k=***"
    # a trace line is JSON: the key's JSON spelling is masked too
    odd = KEY + '"\\'
    secret.add(odd)
    line = json.dumps({"note": odd})
    assert secret.redact(line) == '{"note": "***"}'


def test_a_trace_over_the_server_writes_no_key(fake, tmp_path):  # noqa: F811
    proc = run_cli(*trace_args(fake.url, "--api-key", KEY))
    clean(proc, KEY)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert records and all(KEY not in json.dumps(r) for r in records)


def test_a_short_key_is_kept_out_of_argv_but_not_masked_in_text():
    """Masking a 2-character key would rewrite every occurrence of it in a trace."""
    secret.collect(["--api-key", "42"], environ={})
    assert secret.redact("n_ctx 4242") == "n_ctx 4242"
    assert without_api_key(["--api-key", "42"]) == ([], {"OPENAI_API_KEY": "42"})
