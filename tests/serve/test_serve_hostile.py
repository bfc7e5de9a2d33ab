"""``tokenstep serve`` against frames and requests no browser sends: a real server process, a
real app per tab, real websocket frames (aiohttp's client). Each time the tab must still
answer, a closed tab must end its app by its own quit (exit code 0, not SIGKILL) with the
conversation autosaved, and the server's log must hold no traceback and none of the bytes sent.

The reply plays on until the tab closes (the end-of-generation tokens are biased away and a
full context shifts), so the cut reply is in the autosave only if the quit wrote it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import aiohttp
import pytest
from aiohttp import WSMessage, WSMsgType

from tests.support.serve_server import Served, conversation, gone, wait_for
from tests.support.serve_tabs import MESSAGE, Tab, drawn, open_tab, run
from tui.serve_input import CHUNK, MAX_COLS, MAX_ROWS, chunks, clamp_size, read_frame

ENDLESS = ("--context-full", "shift", "-l", "0-inf", "-l", "2-inf", "-l", "4-inf")


@pytest.fixture
def served(tmp_path):
    server = Served(tmp_path, *ENDLESS)
    yield server
    server.close()


def log_of(served: Served) -> str:
    return "".join(served.lines)


async def answers(tab: Tab, width: int) -> None:
    """The app still takes a resize and draws for it (its too-small notice names the size)."""
    await tab.send("resize", {"width": width, "height": 20})
    needle = f"this terminal is {width}".encode()
    await tab.until(lambda s: needle in s, f"the app to answer a resize to {width}")


async def mid_reply(session: aiohttp.ClientSession, served: Served) -> tuple[Tab, int]:
    tab = await open_tab(session, served)
    await tab.until(drawn, "the app")
    (app,) = served.apps()
    await tab.send("stdin", MESSAGE)
    await tab.send("stdin", "\r")
    await tab.until(lambda s: b"generating" in s, "the reply to start")
    return tab, app


def closed_by_its_own_quit(served: Served, app: int) -> None:
    wait_for(lambda: gone(app), "the app process to end")
    wait_for(lambda: "tab 1 closed" in log_of(served), "the server to log the close")
    assert f"app process {app} ended (exit code 0)" in log_of(served), log_of(served)
    (saved,) = served.autosave_files()
    convo = conversation(saved)
    assert convo[0] == {"role": "user", "content": MESSAGE}
    assert len(convo) == 2 and convo[1]["role"] == "assistant"  # the cut reply, saved on quit
    assert convo[1]["content"]


def clean(log: str, *sent: str) -> None:
    assert "Traceback" not in log, log
    for needle in sent:
        assert needle not in log, log


@pytest.mark.parametrize(
    "size", [{"width": -1, "height": 99999}, {"width": 10**12, "height": "99999"}]
)
def test_a_huge_resize_is_clamped_and_the_tab_answers(served, size):
    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            tab, app = await mid_reply(session, served)
            seen = len(tab.screen)
            await tab.send("resize", size)
            # A frame for 200 rows (Textual starts each row with ESC[row;1H): the app laid the
            # screen out at the clamped size (at 99,999 rows it never finished).
            await tab.until(lambda s: b"\x1b[200;1H" in s[seen:], "a frame 200 rows high")
            await answers(tab, 70)
            assert b"\x1b[201;1H" not in tab.screen[seen:]  # no row past the clamp, ever
            await tab.ws.close()
            return app

    closed_by_its_own_quit(served, run(go()))
    clean(log_of(served))


def test_a_1_mb_stdin_frame_leaves_the_tab_answering_and_its_close_autosaves(served):
    """Not a bracketed paste: a key press per character, about 30 us each in the app's input
    thread. The server hands them on as the app reads them, so a tab closed during the flood
    has its quit read at once, not after the whole megabyte (which took over 9 s)."""

    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            tab, app = await mid_reply(session, served)
            await tab.send("stdin", "x" * 200_000)
            await answers(tab, 70)  # queued behind the flood: the app got through it
            await tab.send("stdin", "y" * 1_000_000)
            await tab.ws.close()  # at once: the rest of this flood never reaches the app
            return app

    closed_by_its_own_quit(served, run(go()))
    clean(log_of(served), "xxxxxxxx", "yyyyyyyy")


def test_frames_textual_js_never_sends_are_dropped(served):
    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            tab, app = await mid_reply(session, served)
            seen = len(tab.texts)
            for text in (
                "not json",
                "[",
                "{}",
                "[]",
                '"stdin"',
                '["launch", {}]',
                '["stdin", 5]',
                '["stdin", ["a"]]',
                '["resize", "big"]',
                '["resize"]',
                '["ping", {"a": 1}]',
                "[" * 100_000,
                '["stdin", "\\ud800 lone"]',  # a lone surrogate: not UTF-8
            ):
                await tab.ws.send_str(text)
            await tab.ws.send_bytes(b"\x00\xff binary")
            await tab.ws.send_str(json.dumps(["ping", "t1"]))
            # the first text frame since the garbage: none of it was answered
            assert json.loads(await tab.text(seen, "the pong")) == ["pong", "t1"]
            assert not tab.closed
            await answers(tab, 71)
            await tab.ws.close()
            return app

    closed_by_its_own_quit(served, run(go()))
    log = log_of(served)
    clean(log, "not json", "launch")
    assert log.count("dropped a websocket frame textual.js does not send") == 1, log


def test_a_10000_character_url_is_refused_in_one_line(served):
    for path in ("/?x=" + "B" * 10_000, "/ws?width=" + "9" * 10_000, "/" + "C" * 10_000):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served.url + path, timeout=60)
        assert refused.value.code == 400
    wait_for(lambda: log_of(served).count("refused a request from 127.0.0.1") == 3, "the log")
    log = log_of(served)
    clean(log, "BBBBBBBB", "99999999", "CCCCCCCC", "bytearray")
    assert "longer than the 8,190 bytes aiohttp reads (HTTP 400)." in log
    with urllib.request.urlopen(served.url, timeout=60) as page:  # the server serves on
        assert page.status == 200


# -- the checks themselves (no process) ----------------------------------------------------------
def frame(text: str) -> WSMessage:
    return WSMessage(WSMsgType.TEXT, text, None)


def test_sizes_are_clamped_to_what_a_terminal_can_be():
    assert clamp_size(-1, 99999) == (1, MAX_ROWS)
    assert clamp_size(10**30, 0) == (MAX_COLS, 1)
    assert clamp_size("120", "40") == (120, 40)
    assert clamp_size(None, "9" * 10_000) == (80, 24)  # not a number: the default
    assert clamp_size(True, 33.0) == (80, 33)
    assert clamp_size(80.5, float("nan")) == (80, 24)
    resize = read_frame(frame('["resize", {"width": 60, "height": 20}]'))
    assert resize is not None and resize.size == (60, 20)  # below 80x24: the app says so


def test_stdin_is_cut_into_whole_utf8_pieces():
    data = ("é" * 3000 + "🐉" * 2000 + "x").encode()
    pieces = chunks(data)
    assert b"".join(pieces) == data
    assert all(len(p) <= CHUNK for p in pieces) and len(pieces) > 1
    for p in pieces:
        p.decode("utf-8")  # each piece is whole characters
    stdin = read_frame(frame(json.dumps(["stdin", "\ud800a"])))
    assert stdin is not None and stdin.data == "\ufffda".encode()
    pair = read_frame(frame('["stdin", "\\ud83d\\ude00"]'))  # a surrogate pair: one character
    assert pair is not None and pair.data == "😀".encode()
