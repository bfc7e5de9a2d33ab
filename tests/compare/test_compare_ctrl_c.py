"""Ctrl-C at any moment of ``tokenstep compare`` on a terminal: while the models load, on the
first decode, and in the last window, the run ends with one sentence and exit code 130 (issue
#31: under load a SIGINT sent right after the first progress line was lost and the run
printed its table and exited 0). The machine is made busy by the test itself, two spinning
children for its whole length, so the moments the signal lands in do not depend on what
else runs beside the suite. The mechanism is every command's (:mod:`tui.engine.model.interrupt`,
its own tests in ``tests/engine/model/test_interrupt.py``)."""

from __future__ import annotations

import os
import signal
import termios
from pathlib import Path

import pytest

from tests.support.busy import spinning
from tests.support.pty import Terminal

TEXT = Path(__file__).parent / "compare_text.txt"
# test_compare_progress.py's run: two chunks with B at -ub 1, 126 positions (63 a window)
FLAGS = ("compare", "-f", str(TEXT), "-c", "128", "-b", "128", "-ub", "128", "--chunks")
FLAGS += ("--text", "--vs", "-ub", "1")
START = b"compare: 0 of 126 positions"


def echo_on(fd: int) -> bool:
    return bool(termios.tcgetattr(fd)[3] & termios.ECHO)


@pytest.fixture
def busy():
    """Two busy loops, one per core of a 2-core machine, stopped after the test."""
    with spinning(2):
        yield


@pytest.mark.parametrize(
    "moment",
    ["loading", "first decode", "last window"],
)
def test_ctrl_c_at_any_moment_says_one_sentence_and_exits_130(tmp_path, busy, moment):
    term = Terminal(tmp_path, *FLAGS, cols=120, rows=30)
    try:
        if moment == "loading":  # echo goes off just before the models load
            while echo_on(term.master):
                assert term.proc.poll() is None, bytes(term.out)
        elif moment == "first decode":
            term.until(START, "the progress line once the models are loaded")
        else:  # the first chunk's 63 positions compared: the second, last window decodes
            term.until(b"compare: 63 of 126 positions", "the first chunk's count")
        since = term.mark()
        os.killpg(term.proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground
        term.until(b"interrupted", "the sentence for Ctrl-C", since)
        assert term.proc.wait(240) == 130
        assert echo_on(term.master)  # restored, however the run ended
        with term._lock:
            out = bytes(term.out)
        assert b"Traceback" not in out and b"top-1 differs" not in out
        assert out.count(b"interrupted") == 1
    finally:
        if term.proc.poll() is None:
            os.killpg(term.proc.pid, signal.SIGKILL)
            term.proc.wait()
        os.close(term.master)
