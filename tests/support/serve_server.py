"""A real ``tokenstep serve`` for the tests: started as a user would, on a free port on
127.0.0.1, its app processes read from the kernel (/proc), never from the server's own word."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.processes import track
from tui.worker.session_store import read_session

APP_FLAGS = ("-c", "512", "--greedy", "-t", "1")
TIMEOUT = 120.0  # generous: the machine is shared; nothing here is a speed check


def wait_for(cond: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    """Poll until ``cond()`` is truthy; fail with ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """The kernel's list of a process's children (every thread's)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with_children = task / "children"
        if with_children.exists():
            out += [int(c) for c in with_children.read_text().split()]
    return out


def state(pid: int) -> str | None:
    """A process's state letter (Z is a zombie), or None once it is gone for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def gone(pid: int) -> bool:
    """Ended and reaped: no process, no zombie, no orphan under another parent."""
    return state(pid) is None


class Served:
    def __init__(self, tmp: Path, *flags: str, max_sessions: int = 8) -> None:
        self.port = free_port()
        self.autosaves = tmp / "autosave"
        env = {**os.environ, "TOKENSTEP_AUTOSAVE_DIR": str(self.autosaves), "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "tui", "serve", "--port", str(self.port)]
        argv += ["--max-sessions", str(max_sessions), *APP_FLAGS, *flags]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp
        )
        track(self.proc, f"tokenstep serve on port {self.port}")
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(
            lambda: (
                any("tokenstep serve:" in x for x in self.lines) or self.proc.poll() is not None
            ),
            "the server",
        )
        assert self.proc.poll() is None, "\n".join(self.lines)
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace"))

    def apps(self) -> list[int]:
        return children(self.proc.pid)

    def autosave_files(self) -> list[Path]:
        return sorted(self.autosaves.rglob("*.jsonl"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def conversation(path: Path) -> list[dict]:
    """The conversation in an autosave file, read with the app's own reader."""
    header, _ = read_session(path)
    return list(header["conversation"])
