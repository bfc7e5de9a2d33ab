"""Ctrl-C at any moment of ``tokenstep compare`` on a terminal: while the models load, on the
first decode, and in the last window, the run ends with one sentence and exit code 130 (issue
#31: under load a SIGINT sent right after the first progress line was lost and the run
printed its table and exited 0). The machine is made busy by the test itself, two spinning
children for its whole length, so the moments the signal lands in do not depend on what
else runs beside the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import termios

import pytest

from tests.compare.test_compare_progress import FLAGS, START
from tests.support.pty import Terminal

SPIN = "while True: pass"


def echo_on(fd: int) -> bool:
    return bool(termios.tcgetattr(fd)[3] & termios.ECHO)


@pytest.fixture
def busy():
    """Two busy loops, one per core of a 2-core machine, stopped after the test."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


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
                term.until(b"", "the process")  # lets the reader run; fails if it exited
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


def test_a_ctrl_c_whose_raise_was_dropped_is_raised_at_the_next_check():
    """Python raised KeyboardInterrupt where it was printed and dropped (a ctypes callback, a
    finalizer; here a handler that raises nothing stands for that): the next check raises it,
    and every check after; a signal other than SIGINT raises nothing."""
    from tui.compare.progress import CtrlC

    heard: list[int] = []
    old = signal.signal(signal.SIGINT, lambda n, _f: heard.append(n))
    try:
        with CtrlC() as ctrl_c:
            ctrl_c.check()  # nothing yet
            signal.raise_signal(signal.SIGINT)
            assert heard == [signal.SIGINT]
            with pytest.raises(KeyboardInterrupt):
                ctrl_c.check()
            with pytest.raises(KeyboardInterrupt):
                ctrl_c.check()
        assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd given back
    finally:
        signal.signal(signal.SIGINT, old)
