"""The app in a real pseudo-terminal."""

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

from tests.support.cli import ROOT

TIMEOUT = 240.0  # the machine is shared; nothing here is a speed check


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
