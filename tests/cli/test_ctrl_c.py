"""Ctrl-C at chosen moments of ``tokenstep trace`` and of the app's start-up, on a terminal
(issue #31): while llama.cpp loads the model, and mid-run after the first JSON line. Each ends
with one sentence and exit code 130, never a traceback, never a run that goes on to the end,
and the app leaves the terminal as it found it.

While the model loads, llama.cpp calls its log back through ctypes thousands of times, so
Python's handler for a SIGINT sent then runs inside that callback, where a raised
``KeyboardInterrupt`` was printed and dropped by ctypes and the run went on. The moment is
read off ``/proc``: llama.cpp's loader holds the model file open with a plain ``fopen``
(no ``O_CLOEXEC``) for the whole load, while tokenstep's own header reader opens it with
Python's ``open`` (always close-on-exec). Two spinning children keep both cores busy
throughout, as in ``tests/compare/test_compare_ctrl_c.py``."""

from __future__ import annotations

import json
import os
import signal
import socket
import termios
from pathlib import Path

import pytest

from tests.support.busy import spinning
from tests.support.pty import TIMEOUT, Terminal

O_CLOEXEC = 0o2000000


def llama_cpp_loading(pid: int, model: Path) -> bool:
    """Whether llama.cpp's model loader has ``model`` open in process ``pid`` (an fd on it
    without close-on-exec, which every file Python opens has)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for fd in names:
        try:
            if os.readlink(fds / fd) != str(model):
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:  # closed meanwhile
            continue
        flags = int(info.split("flags:")[1].split()[0], 8)
        if not flags & O_CLOEXEC:
            return True
    return False


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def wait_for(term: Terminal, condition, what: str) -> None:
    """Poll ``condition`` until it holds (the process still running)."""
    import time

    end = time.monotonic() + TIMEOUT
    while not condition():
        assert term.proc.poll() is None, (
            f"{what}: exited {term.proc.returncode}, {bytes(term.out)!r}"
        )
        assert time.monotonic() < end, f"no {what}"
        time.sleep(0.001)


def interrupt(term: Terminal, needle: bytes) -> bytes:
    """Ctrl-C to the foreground process group; the whole output once it has said ``needle``
    and exited 130."""
    since = term.mark()
    os.killpg(term.proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground
    term.until(needle, "the sentence for Ctrl-C", since)
    assert term.proc.wait(TIMEOUT) == 130
    with term._lock:
        out = bytes(term.out)
    assert b"Traceback" not in out and b"Exception ignored" not in out, out[-3000:]
    assert out.count(needle) == 1, out[-3000:]
    return out


@pytest.fixture
def busy():
    with spinning(2):
        yield


@pytest.fixture
def terminals():
    made: list[Terminal] = []
    yield made
    for term in made:
        if term.proc.poll() is None:
            os.killpg(term.proc.pid, signal.SIGKILL)
            term.proc.wait()
        os.close(term.master)


N = 3000
TRACE = ("trace", "-p", "The cat sat on the mat.", "-n", str(N), "-c", "4096")
TRACE_SAYS = b"tokenstep trace: interrupted"


def records(out: bytes) -> list[dict]:
    """The JSON lines written (a pty ends each with CR LF); every one of them whole."""
    lines = [ln for ln in out.split(b"\r\n") if ln.startswith(b"{")]
    return [json.loads(ln) for ln in lines]


def test_ctrl_c_while_llama_cpp_loads_the_model_ends_trace(tmp_path, busy, terminals, model_path):
    term = Terminal(tmp_path, *TRACE, "-m", str(model_path))
    terminals.append(term)
    wait_for(term, lambda: llama_cpp_loading(term.proc.pid, model_path), "model load")
    out = interrupt(term, TRACE_SAYS)
    assert records(out) == []  # no decode ran after it


def test_ctrl_c_after_the_first_record_ends_trace_with_whole_lines(
    tmp_path, busy, terminals, model_path
):
    term = Terminal(tmp_path, *TRACE, "-m", str(model_path))
    terminals.append(term)
    first = term.until(b'{"step"', "the first record")
    term.until(b"\r\n", "the end of the first record", first)
    out = interrupt(term, TRACE_SAYS)
    got = records(out)
    assert 1 <= len(got) < N and b"stopped after" not in out
    assert [r["step"] for r in got] == list(range(len(got)))


def test_ctrl_c_while_the_app_loads_its_model_exits_130_with_the_terminal_restored(
    tmp_path, busy, terminals, model_path
):
    term = Terminal(tmp_path, "-m", str(model_path), cols=120, rows=30)
    terminals.append(term)
    before = termios.tcgetattr(term.master)
    # the terminal's watchdog starts just before the model loads (the flags' own check loads
    # the vocabulary before it, without one)
    wait_for(term, lambda: children(term.proc.pid), "the terminal's watchdog")
    watchdog = children(term.proc.pid)
    wait_for(term, lambda: llama_cpp_loading(term.proc.pid, model_path), "model load")
    out = interrupt(term, b"tokenstep: interrupted")
    assert termios.tcgetattr(term.master) == before  # as the app found it
    assert b"\x1b[?1049h" not in out  # the screen was never taken
    assert b"terminal restored" not in out  # the watchdog was told, not needed
    assert not any(Path(f"/proc/{pid}").exists() for pid in watchdog)


def test_ctrl_c_while_serve_checks_the_model_ends_before_the_port_is_bound(
    tmp_path, busy, terminals, model_path
):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    term = Terminal(tmp_path, "serve", "--port", str(port), "-m", str(model_path))
    terminals.append(term)
    # the app flags' check loads the vocabulary once, before the server starts
    wait_for(term, lambda: llama_cpp_loading(term.proc.pid, model_path), "vocabulary load")
    out = interrupt(term, b"tokenstep serve: interrupted; the server did not start.")
    assert b"tokenstep serve:" not in out.replace(b"tokenstep serve: interrupted", b"")
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
