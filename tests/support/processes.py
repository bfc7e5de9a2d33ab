"""Server processes the tests start, and the check that none outlives the fixture or test that
started it.

A whole run once ended with 9 llama-server and 4 llama-cpp-python server processes alive at
once (about 3 GB): session-scoped fixtures imported into each test module are one fixture per
module, each kept until the session ended. Every server a helper starts is noted here
(:func:`track`); after each module, and at the session's end, conftest.py asks
:func:`left_running` for those still alive and for any process under pytest whose command
line is a server's, stops them, and fails the run naming them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Command-line words that make a process a server: llama.cpp's llama-server,
# llama-cpp-python's server, a `tokenstep serve` (its app processes are its children).
SERVER_WORDS = (b"llama-server", b"llama_cpp.server", b"-m\0tui\0serve\0")

_started: list[tuple[subprocess.Popen[bytes], str]] = []


def track(proc: subprocess.Popen[bytes], what: str) -> subprocess.Popen[bytes]:
    """Note a server process a test helper started (``what`` names it in a failure)."""
    _started.append((proc, what))
    return proc


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no memory; its parent has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from the kernel's lists of children (every thread's)."""
    try:
        import psutil  # type: ignore[import-untyped]

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - the process went away meanwhile
        return []
    out: list[int] = []
    todo = [pid]
    while todo:
        tasks = Path(f"/proc/{todo.pop()}/task")
        try:
            kids = [
                int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()
            ]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def left_running() -> dict[int, str]:
    """Servers still running: the ones noted by :func:`track` and any process under this one
    whose command line is a server's (pid: what it is)."""
    found: dict[int, str] = {}
    for proc, what in list(_started):
        if proc.poll() is None:
            found[proc.pid] = what
        else:
            _started.remove((proc, what))
    for pid in descendants(os.getpid()):
        cmd = _cmdline(pid) + b"\0"
        if pid not in found and _running(pid) and any(w in cmd for w in SERVER_WORDS):
            found[pid] = cmd.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    return found


def stop_all(pids: dict[int, str]) -> None:
    """Stop what :func:`left_running` found (SIGTERM, then SIGKILL), so that one leak does not
    fail every module after it."""
    procs = {proc.pid: proc for proc, _ in _started}
    for pid in pids:
        proc = procs.get(pid)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
            _started[:] = [(p, w) for p, w in _started if p is not proc]
            continue
        try:
            os.kill(pid, 9)
        except OSError:
            pass
