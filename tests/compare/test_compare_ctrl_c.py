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
from pathlib import Path

import pytest

from tests.support.pty import Terminal
from tui.compare.progress import CtrlC

TEXT = Path(__file__).parent / "compare_text.txt"
# test_compare_progress.py's run: two chunks with B at -ub 1, 126 positions (63 a window)
FLAGS = ("compare", "-f", str(TEXT), "-c", "128", "-b", "128", "-ub", "128", "--chunks")
FLAGS += ("--text", "--vs", "-ub", "1")
START = b"compare: 0 of 126 positions"
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


def test_a_sigint_whose_python_handler_never_ran_is_raised_at_the_next_check():
    """The C handler ran (on a thread that could not wake the main one, or the raise was lost;
    here a handler that does nothing stands for that): the wakeup fd still holds SIGINT, and
    the next check raises it, and every check after; Python's handler is given back."""
    with CtrlC() as ctrl_c:
        ctrl_c.check()  # nothing yet
        mine = signal.signal(signal.SIGINT, lambda _n, _f: None)
        signal.raise_signal(signal.SIGINT)
        signal.signal(signal.SIGINT, mine)
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd given back


class SignalsOnEnter:
    """Stands for llama_log's lock: a Ctrl-C lands while the log callback holds it."""

    def __enter__(self) -> None:
        signal.raise_signal(signal.SIGINT)

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_ctrl_c_inside_llama_cpp_s_log_callback_is_kept_for_the_next_check(monkeypatch):
    """A raise inside a ctypes callback is printed ("Exception ignored ... Traceback") and
    dropped, and llama.cpp logs through one ~3,200 times while a model loads: there the
    handler records the Ctrl-C without raising, and the run's next check raises it."""
    import llama_cpp

    from tui.engine.model import llama_log

    monkeypatch.setattr(llama_log, "_lock", SignalsOnEnter())
    dropped: list[object] = []  # what ctypes prints as "Exception ignored" goes here
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    callback = llama_cpp.llama_log_callback(llama_log._on_log)
    with CtrlC() as ctrl_c:
        callback(2, b"a line\n", None)  # through ctypes, as llama.cpp calls it
        assert ctrl_c.hit
        assert dropped == []  # nothing raised there
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
        with pytest.raises(KeyboardInterrupt):  # outside a callback it raises at once
            signal.raise_signal(signal.SIGINT)
