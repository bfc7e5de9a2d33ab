"""Issue 22: a native crash leaves a clue and a usable terminal. The app's start-up installs
faulthandler on a file in the autosave folder; a child that dies of SIGSEGV leaves its stack
there, the next start says so in one line (once), and under a real terminal (a pty) the
watchdog gives the terminal back: its termios mode and the escape codes that leave the app's
screen."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.cli import ROOT
from tui import crash
from tui.engine.model.model import system_info

# The app's whole start-up (run_app), with the screen's event loop replaced by ``HOW``: a crash
# by a signal, a crash inside llama.cpp (a null model handed to it through the engine), or a
# clean run that prints the notice the app would show first.
CHILD = r"""
import os, signal, sys
from tui.app import TokenstepApp

how = os.environ["HOW"]


def run(self, *a, **k):
    print("NOTICE", self.worker.state.notice, flush=True)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "llama":
        from tui.engine.model.model import _meta_str
        _meta_str(None, "general.name")


TokenstepApp.run = run
TokenstepApp.quit_now = True
from tui.cli import main
sys.exit(main(["-c", "512", "-t", "1"]))
"""
TIMEOUT = 300.0


def start_app(folder: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENSTEP_AUTOSAVE_DIR": str(folder)}
    env["HOW"] = how
    return subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def crash_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("crash-*.log"))


def test_a_segfault_leaves_its_stack_and_the_next_start_says_so_once(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    clean = start_app(folder, "clean")
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert crash_files(folder) == []  # a clean run leaves nothing behind
    died = start_app(folder, "kill")
    assert died.returncode == -signal.SIGSEGV, died.stderr[-2000:]
    (path,) = crash_files(folder)
    text = path.read_text()
    assert text.startswith(f"tokenstep pid {path.stem.rsplit('-', 1)[1]}, started ")
    assert f"llama.cpp: {system_info()}\n" in text  # what a bug report needs first
    assert "Fatal Python error: Segmentation fault" in text
    assert "line" in text and "in run" in text  # the stack of the thread that died
    nxt = start_app(folder, "clean")
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    line = f"The last run ended in a native crash (Segmentation fault); its stack is in {path}."
    assert f"tokenstep: {line}\n" in nxt.stderr  # before the screen is taken
    assert f"NOTICE {line}" in nxt.stdout  # and as the app's first notice
    assert crash_files(folder) == [path]  # kept for the bug report
    again = start_app(folder, "clean")
    assert again.returncode == 0 and "The last run" not in again.stderr + again.stdout


def test_a_crash_inside_llama_cpp_is_named_so(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    died = start_app(folder, "llama")
    assert died.returncode == -signal.SIGSEGV, died.stderr[-2000:]
    (path,) = crash_files(folder)
    assert "tui/engine/model/model.py" in path.read_text()
    nxt = start_app(folder, "clean")
    assert (
        f"The last run ended in a crash in llama.cpp (Segmentation fault); its stack is in {path}."
        in nxt.stderr
    )


def test_a_file_of_a_live_process_or_without_a_stack(tmp_path: Path) -> None:
    """Another tokenstep still running keeps its file; a run killed without a stack (SIGKILL)
    leaves a file that says nothing, which goes without a word."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f"crash-20260101-000000-{sleeper.pid}.log"
        live.write_text("tokenstep pid ...\n\nFatal Python error: Segmentation fault\n")
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        killed = tmp_path / f"crash-20260101-000001-{int(gone.stdout)}.log"
        killed.write_text("tokenstep pid ...\nllama.cpp: CPU : AVX2 = 1 |\n\n")
        assert crash.previous_crash(tmp_path) is None
        assert live.exists() and not killed.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert crash.previous_crash(tmp_path) is not None  # now its process is gone
    assert crash.previous_crash(tmp_path) is None  # said once


# -- under a real terminal -------------------------------------------------------------------


_ESC = re.compile(rb"\x1b\[[0-9;?<>]*[a-zA-Z]")


def _seen(buf: bytearray, want: bytes) -> bool:
    """``want`` in the terminal's bytes, or in its text once the escape codes are taken out."""
    return want in buf or want in _ESC.sub(b"", bytes(buf))


def _read_until(fd: int, buf: bytearray, want: bytes, timeout: float = TIMEOUT) -> bool:
    end = time.monotonic() + timeout
    while not _seen(buf, want) and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return _seen(buf, want)


def _wait_reading(proc: subprocess.Popen[bytes], fd: int, buf: bytearray) -> int:
    """Wait for the process to end while reading what it writes (a full pty would block it)."""
    end = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                break
    return proc.wait(5)


@contextmanager
def _on_a_pty(
    folder: Path, *argv: str, screen: bool = True
) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """``python argv`` on a pty of its own (120 x 40 and a TERM where ``screen``), killed if it
    is still running and the pty closed when the block ends."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENSTEP_AUTOSAVE_DIR": str(folder)}
    if screen:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    try:
        yield proc, master, slave
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)


APP = ("-m", "tui", "-c", "512", "-t", "1")


def test_a_segfault_gives_the_terminal_back(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    with _on_a_pty(folder, *APP) as (proc, master, slave):
        before = termios.tcgetattr(slave)
        buf = bytearray()
        assert _read_until(master, buf, b"\x1b[?1049h"), bytes(buf[-2000:])  # screen taken
        assert _read_until(master, buf, b"autosave after each reply"), bytes(buf[-2000:])  # drawn
        raw = termios.tcgetattr(slave)
        assert not raw[3] & termios.ICANON  # the app's raw mode
        proc.send_signal(signal.SIGSEGV)
        assert _wait_reading(proc, master, buf) == -signal.SIGSEGV
        (path,) = crash_files(folder)
        note = f"tokenstep: the app crashed; terminal restored; the stack is in {path}".encode()
        assert _read_until(master, buf, note, 60), bytes(buf[-2000:])
        tail = bytes(buf[buf.rindex(b"\x1b[?1049h") :])
        assert crash.RESTORE.encode() in tail  # the alternate screen left, mouse off, cursor
        assert termios.tcgetattr(slave) == before  # the mode the shell had


def test_a_clean_quit_leaves_no_file_and_no_word(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    with _on_a_pty(folder, *APP) as (proc, master, _):
        buf = bytearray()
        assert _read_until(master, buf, b"autosave after each reply"), bytes(buf[-2000:])
        assert len(crash_files(folder)) == 1  # the live file, while the app runs
        os.write(master, b"\x11")  # ctrl+q
        assert _wait_reading(proc, master, buf) == 0
        assert b"the app crashed" not in buf
        assert crash_files(folder) == []


def test_trace_says_where_a_native_crash_happened() -> None:
    """`tokenstep trace` dying inside llama.cpp prints the Python stack on stderr (it used to
    end with exit code 139 and nothing said)."""
    code = (
        "import sys\n"
        "import tui.trace_cli as c\n"
        "from tui.engine.model.model import _meta_str\n"
        "c.trace_main = lambda args: _meta_str(None, 'general.name')\n"
        "from tui.cli import main\n"
        "sys.exit(main(['trace', '-p', 'hi']))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in res.stderr
    assert "tui/engine/model/model.py" in res.stderr


def test_a_crash_before_the_screen_is_taken_writes_no_escape_codes(tmp_path: Path) -> None:
    """A crash while the model loads: the note, the terminal's mode kept, and no escape code
    (leaving an alternate screen never entered would move the cursor)."""
    folder = tmp_path / "sessions"
    code = (
        "import sys\n"
        "import tui.startup as s\n"
        "from tui.engine.model.model import _meta_str\n"
        "s.engine_from_args = lambda args, **kw: _meta_str(None, 'general.name')\n"
        "from tui.cli import main\n"
        "sys.exit(main(['-c', '512', '-t', '1']))\n"
    )
    with _on_a_pty(folder, "-c", code, screen=False) as (proc, master, slave):
        before = termios.tcgetattr(slave)
        buf = bytearray()
        assert _wait_reading(proc, master, buf) == -signal.SIGSEGV
        (path,) = crash_files(folder)
        note = f"tokenstep: the app crashed; terminal restored; the stack is in {path}".encode()
        assert _read_until(master, buf, note, 60), bytes(buf[-2000:])
        assert b"\x1b[" not in buf
        assert termios.tcgetattr(slave) == before


def test_a_pid_used_again_still_tells_the_crash(tmp_path: Path) -> None:
    """In a container every run can have the same pid: a stack under this process's own pid is
    an earlier run's, and is told; this process's own live file (no stack) stays."""
    mine = tmp_path / f"crash-20260101-000000-{os.getpid()}.log"
    mine.write_text("tokenstep pid ...\n\nFatal Python error: Bus error\n")
    live = crash.CrashLog(tmp_path / "live")
    assert live.install("llama.cpp: CPU : AVX2 = 1 |")
    try:
        assert crash.previous_crash(live.folder) is None and live.path.exists()
    finally:
        live.close()
    assert not live.path.exists()
    line = crash.previous_crash(tmp_path)
    assert line == f"The last run ended in a native crash (Bus error); its stack is in {mine}."


# faulthandler's output in its three shapes (Python 3.11), paths as in a real install.
ON_AN_OPENMP_WORKER = """Fatal Python error: Segmentation fault

Thread 0x00007f78c77fe6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/home/u/tokenstep/tui/worker/key_lane.py", line 93 in _run

Thread 0x00007f78c7fff6c0 (most recent call first):
  File "/home/u/tokenstep/tui/engine/run/decode.py", line 61 in decode
  File "/home/u/tokenstep/tui/engine/run/session.py", line 240 in step

Thread 0x00007f78cc9386c0 (most recent call first):
  File "/home/u/.venv/lib/python3.11/site-packages/textual/app.py", line 2100 in run

Extension modules: numpy._core._multiarray_umath (total: 1)
"""
IN_THE_DECODE_THREAD = ON_AN_OPENMP_WORKER.replace(
    "Thread 0x00007f78c7fff6c0", "Current thread 0x00007f78c7fff6c0"
)
IN_TEXTUAL = ON_AN_OPENMP_WORKER.replace(
    "Thread 0x00007f78cc9386c0", "Current thread 0x00007f78cc9386c0"
)
NO_ENGINE_FRAME = ON_AN_OPENMP_WORKER.replace("tui/engine/run/decode.py", "tui/worker/thread.py")


def test_where_the_stack_puts_the_crash() -> None:
    assert crash.where(IN_THE_DECODE_THREAD) == "llama.cpp"
    assert crash.where(ON_AN_OPENMP_WORKER) == "llama.cpp"  # llama.cpp #20824's shape
    assert crash.where(IN_TEXTUAL) == "native"
    assert crash.where(NO_ENGINE_FRAME) == "native"
    assert crash.where("Fatal Python error: Aborted\n\n") == "native"


def test_a_crash_on_a_thread_python_does_not_know_is_told(tmp_path: Path) -> None:
    """A native thread (as llama.cpp's OpenMP workers are) that jumps to address 0: faulthandler
    still writes every Python thread's stack, and the next start tells it."""
    # The native thread starts only once the main thread sleeps (line 12): started from the
    # main thread itself, it could crash before pthread_create had returned there (seen under
    # load: the main thread's frame was still on the pthread_create line).
    code = (
        "import ctypes, sys, threading, time\n"
        "from pathlib import Path\n"
        "from tui import crash\n"
        "crash.CrashLog(Path(sys.argv[1])).install('llama.cpp: ...')\n"
        "main = threading.main_thread().ident\n"
        "def start():\n"
        "    while sys._current_frames()[main].f_lineno != 12:\n"
        "        time.sleep(0.001)\n"
        "    t = ctypes.c_ulong()\n"
        "    ctypes.CDLL(None).pthread_create(ctypes.byref(t), None, ctypes.c_void_p(0), None)\n"
        "threading.Thread(target=start, daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == -signal.SIGSEGV
    (path,) = crash_files(tmp_path)
    text = path.read_text()
    assert "Fatal Python error: Segmentation fault" in text and "Current thread" not in text
    assert 'File "<string>", line 12 in <module>' in text  # the main thread, asleep
    assert crash.previous_crash(tmp_path) == (
        f"The last run ended in a native crash (Segmentation fault); its stack is in {path}."
    )
