"""``tokenstep serve`` over textual-serve's own websocket protocol, spoken with aiohttp:
``["stdin", text]`` and ``["resize", {...}]`` in, the app's screen bytes out. The app processes
are read from the kernel (/proc): a tab over the cap starts none, a closed tab leaves none.
"""

from __future__ import annotations

import socket

import aiohttp
import pytest

from tests.support.cli import one_sentence, run_cli
from tests.support.serve_server import Served, conversation, free_port, gone, wait_for
from tests.support.serve_tabs import MESSAGE, drawn, open_tab, run
from tui.widgets.help import help_text


@pytest.fixture
def serve(tmp_path):
    """Start ``tokenstep serve`` (stopped after the test)."""
    started: list[Served] = []

    def start(max_sessions: int = 8) -> Served:
        started.append(Served(tmp_path, max_sessions=max_sessions))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture
def served(serve):
    return serve()


def test_a_tab_over_the_cap_is_told_so_and_starts_no_process(serve):
    served = serve(max_sessions=1)

    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            first = await open_tab(session, served)
            await first.until(drawn, "the first tab's app")
            (app,) = served.apps()
            async with session.get(served.url) as page:  # the page a second tab would load
                assert page.status == 503
                assert "All 1 tabs this server allows are in use" in await page.text()
            second = await open_tab(session, served)
            await second.until(lambda s: b"--max-sessions 1" in s, "the refusal")
            assert b"All 1 tabs this server allows are in use" in second.screen
            assert served.apps() == [app]  # the refusal started no process
            await second.send("stdin", "hello\r")  # typing at a refused tab starts nothing
            await second.send("resize", {"width": 100, "height": 30})
            await second.ws.close()
            assert served.apps() == [app]
            await first.ws.close()
            wait_for(lambda: gone(app), "the first tab's app process to end")
            assert served.apps() == []
            async with session.get(served.url) as page:  # the freed place is usable again
                assert page.status == 200
                assert "<title>tokenstep · " in await page.text()
            third = await open_tab(session, served)
            await third.until(drawn, "a new tab's app once the first left")
            assert len(served.apps()) == 1
            await third.ws.close()

    run(go())
    wait_for(lambda: served.apps() == [], "every app process to end")


def test_a_tab_closed_mid_reply_ends_its_app_process(served):
    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            tab = await open_tab(session, served)
            await tab.until(drawn, "the app")
            (app,) = served.apps()
            await tab.send("resize", {"width": 100, "height": 32})
            await tab.send("stdin", MESSAGE)
            await tab.send("stdin", "\r")
            await tab.until(lambda s: b"generating" in s, "the reply to start")
            # Mid-reply, the message is already autosaved (a sent message is saved at once,
            # so a crash during the reply keeps it); the reply is not in it yet.
            (early,) = served.autosave_files()
            assert conversation(early) == [{"role": "user", "content": MESSAGE}]
            await tab.ws.close()
            return app

    app = run(go())
    wait_for(lambda: gone(app), "the app process to end")  # gone: not a zombie, not an orphan
    assert served.apps() == []
    assert served.proc.poll() is None  # the server lives on
    # The app ended by its own quit: the worker stopped and autosaved the cut reply.
    (saved,) = wait_for(served.autosave_files, "the autosave")
    assert saved.parent.name == "tab1"
    convo = conversation(saved)
    assert convo[0] == {"role": "user", "content": MESSAGE}


def test_each_tab_autosaves_to_its_own_folder(served):
    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            tabs = [await open_tab(session, served) for _ in range(2)]
            for tab in tabs:
                await tab.until(drawn, "the app")
            assert len(served.apps()) == 2
            for i, tab in enumerate(tabs):
                await tab.send("stdin", f"Say the number {i}.\r")
            for tab in tabs:
                await tab.until(lambda s: b"reply ended" in s, "the reply")
                await tab.ws.close()

    run(go())
    wait_for(lambda: served.apps() == [], "every app process to end")
    files = served.autosave_files()
    assert sorted(f.parent.name for f in files) == ["tab1", "tab2"]
    said = sorted(conversation(f)[0]["content"] for f in files)
    assert said == ["Say the number 0.", "Say the number 1."]


def test_stopping_the_server_ends_every_app_process(served):
    async def go() -> list[int]:
        async with aiohttp.ClientSession() as session:
            tab = await open_tab(session, served)
            await tab.until(drawn, "the app")
            apps = served.apps()
            served.close()  # SIGTERM to the server, with the tab still open
            return apps

    apps = run(go())
    assert apps and served.proc.returncode == 0
    for pid in apps:
        wait_for(lambda pid=pid: gone(pid), "the app process to end")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--port", "0"), "--port must be between 1 and 65535"),
        (("--port", "http"), "argument --port: invalid int value"),
        (("--max-sessions", "0"), "--max-sessions must be at least 1"),
        (("--temp", "warm"), "argument --temp"),  # an app flag, checked once before serving
        (("--no-such-flag",), "unrecognized arguments: --no-such-flag"),
        (("-m", "/no/such/model.gguf"), "/no/such/model.gguf"),
    ],
)
def test_bad_serve_flags_are_one_sentence(flags, needle):
    one_sentence(run_cli("serve", "--port", str(free_port()), *flags), needle)


def test_a_port_in_use_is_one_sentence():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        one_sentence(run_cli("serve", "--port", str(port)), f"cannot listen on 127.0.0.1:{port}")


def test_another_host_is_warned_about_before_it_listens():
    # 192.0.2.1 is TEST-NET-1: no machine has it, so nothing is exposed and the bind fails.
    res = run_cli("serve", "--host", "192.0.2.1", "--port", str(free_port()))
    assert res.returncode == 1 and res.stdout == b""
    warning, error = res.stderr.decode().splitlines()
    assert "warning: listening on 192.0.2.1, so anyone who can reach port" in warning
    assert "can use the model" in warning
    assert error.startswith("tokenstep: cannot listen on 192.0.2.1:") and error.endswith(".")


def test_keys_help_and_resizes_in_a_tab(served):
    """The keys reach the app through the web driver as from a terminal; the help screen says
    what differs in a browser; a tab shrunk below 80×24 and grown back carries on."""
    f1, f2, end = "\x1bOP", "\x1bOQ", "\x1b[F"  # what xterm.js sends for F1, F2 and End

    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            tab = await open_tab(session, served)
            await tab.until(drawn, "the app")
            await tab.send("resize", {"width": 60, "height": 20})
            await tab.until(lambda s: b"this terminal is 60" in s, "the too-small notice")
            await tab.send("resize", {"width": 120, "height": 40})
            await tab.send("stdin", "Say hello.\r")
            await tab.until(lambda s: b"reply ended" in s, "the reply")
            await tab.send("stdin", f2)  # ctrl+n is the browser's (a new window)
            await tab.until(lambda s: b"New chat: the KV cache is empty" in s, "the new chat")
            await tab.send("stdin", f1)
            await tab.until(lambda s: b"PgUp PgDn scroll" in s, "the help screen")
            await tab.send("stdin", end)
            await tab.until(lambda s: b"Closing the tab is how to quit" in s, "the browser part")
            await tab.ws.close()

    run(go())
    wait_for(lambda: served.apps() == [], "the app process to end")
    (saved,) = served.autosave_files()  # the first chat, autosaved by the new chat
    assert conversation(saved)[0] == {"role": "user", "content": "Say hello."}


def test_the_browser_part_of_the_help_shows_only_under_the_web_driver(monkeypatch):
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert "In a browser" not in help_text(None).plain
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    text = help_text(None).plain
    assert "Closing the tab is how to quit" in text and "F2 starts" in text
