"""A paste always lands in the chat box, whatever has the focus: the app runs in a real
pseudo-terminal (``python -m tui`` as a user starts it, Textual's own Linux driver reading the
bytes) and the test writes what a terminal sends for a bracketed paste, ``ESC[200~ ... ESC[201~``.

As reported: while a reply plays the focus is on the controls; a 210 kB paste vanished (the chat
box stayed empty) and the Enter after it forced a token. The reply plays on until the test ends
(end-of-generation tokens are biased away and a full context shifts).
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.conftest import ROOT
from tui.worker.session_store import read_session

TIMEOUT = 240.0  # the machine is shared; nothing here is a speed check
ENDLESS = ("--greedy", "-t", "1", "--context-full", "shift", "-l", "0-inf", "-l", "2-inf")
ENDLESS += ("-l", "4-inf")
START, END = b"\x1b[200~", b"\x1b[201~"


class Terminal:
    """The app on a pty of ``cols`` x ``rows``: everything it draws is kept in ``out``."""

    def __init__(self, tmp: Path, *flags: str, cols: int = 200, rows: int = 50) -> None:
        self.autosaves = tmp / "autosave"
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {
            **os.environ,
            "TERM": "xterm-256color",
            "PYTHONPATH": str(ROOT),
            "TOKENSTEP_AUTOSAVE_DIR": str(self.autosaves),
        }
        for name in ("TEXTUAL_DRIVER", "COLUMNS", "LINES", "ROWS"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tui", *flags],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=tmp,
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.out = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the app closed the terminal
                return
            if not data:
                return
            with self._lock:
                self.out += data

    def write(self, data: bytes) -> None:
        """Everything, however slowly the app reads it (a pty holds a few kB)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.master, view[:4096]) :]

    def mark(self) -> int:
        with self._lock:
            return len(self.out)

    def until(self, needle: bytes, what: str, since: int = 0) -> int:
        """Wait until the app has drawn ``needle`` (after offset ``since``)."""
        end = time.monotonic() + TIMEOUT
        while True:
            with self._lock:
                at = self.out.find(needle, since)
            if at >= 0:
                return at
            if self.proc.poll() is not None or time.monotonic() > end:
                tail = bytes(self.out[-3000:]).decode("utf-8", "replace")
                raise AssertionError(f"no {what} (exit {self.proc.poll()}); last output: {tail}")
            time.sleep(0.05)

    def close(self) -> int:
        if self.proc.poll() is None:
            self.write(b"\x11")  # Ctrl+Q: the app stops its worker and autosaves
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        os.close(self.master)
        return self.proc.returncode


def latest_conversation(folder: Path) -> list[dict]:
    files = sorted(folder.rglob("*.jsonl"))
    if not files:
        return []
    header, _ = read_session(files[-1])
    return list(header["conversation"])


def wait_for(cond, what: str):
    end = time.monotonic() + TIMEOUT
    while not (value := cond()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def reply_playing(term: Terminal, message: bytes) -> None:
    term.until(b"waiting for a message", "the model to load")
    term.write(message + b"\r")
    term.until(b"generating", "the reply to start")


def test_a_paste_in_step_mode_lands_in_the_chat_box_and_enter_sends_it(tmp_path):
    """Paused mid-reply (the keys are on the controls): the paste goes into the chat box, so
    the Enter after it sends it (the message is autosaved as it is sent)."""
    term = Terminal(tmp_path, "-c", "2048", *ENDLESS)
    try:
        reply_playing(term, b"Tell me a story.")
        since = term.mark()
        term.write(b" ")  # space pauses: step mode, the reply waits for a key
        term.until(b"Step mode", "step mode", since)
        lines = [f"Line {i} of the pasted notes about the sea." for i in range(60)]
        pasted = "\n".join(lines)  # 2,6 kB, 60 lines
        term.write(START + pasted.encode() + END)
        term.write(b"\r")
        convo = wait_for(
            lambda: (c := latest_conversation(term.autosaves)) and len(c) >= 3 and c,
            f"the pasted message in the autosave of {term.autosaves}",
        )
        assert convo[-1] == {"role": "user", "content": " ".join(lines)}  # joined, whole
        assert convo[0] == {"role": "user", "content": "Tell me a story."}
    finally:
        code = term.close()
    assert code == 0


def test_a_210_kb_paste_during_a_reply_lands_in_the_chat_box(tmp_path):
    """While the reply plays: the paste is in the box (the notice says where it went); Enter
    then queues it, which the worker refuses in one sentence (too long for -c 512) and hands
    back to the box, while the reply plays on. The Enter forces no token."""
    term = Terminal(tmp_path, "-c", "512", *ENDLESS)
    try:
        reply_playing(term, b"Tell me a story.")
        big = "the waves rolled in and " * 8_750  # 210,000 characters, one line
        since = term.mark()
        term.write(START + big.encode() + END)
        term.until(b"Pasted 210,000 characters into the chat box", "the paste's notice", since)
        term.write(b"\r")
        term.until(b"but the context holds 512", "the refusal", since)
        assert b"Forced token" not in term.out[since:]
    finally:
        code = term.close()
    assert code == 0
    convo = latest_conversation(term.autosaves)
    assert convo[0] == {"role": "user", "content": "Tell me a story."}
    assert len(convo) == 2 and convo[1]["role"] == "assistant"  # the reply, not cut by Enter
