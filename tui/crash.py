"""A native crash (a segfault inside llama.cpp) leaves a clue and a usable terminal.

Python runs nothing after a SIGSEGV, so two things are set up before the app takes the screen.
:class:`CrashLog`: ``faulthandler`` writes every thread's stack to ``<autosave
dir>/crash-<date>-<pid>.log`` on a fatal signal; a clean exit deletes it, and the next start
says once that the previous run crashed (:func:`previous_crash`). :class:`TerminalGuard`: a
watchdog process (``python -I -S``, about 10 MB) holds a pipe's read end; if the app dies
before writing its byte, the watchdog restores the termios mode and, once the screen was
taken, leaves the alternate screen, turns mouse, bracketed paste and focus reporting off and
shows the cursor. It starts before the model loads (0.5 to 1.5 ms; 13 to 16 ms once the
model's pages are mapped, as the fork copies page tables), only on a terminal; the shell may
print its prompt a moment early (press Enter).
"""

from __future__ import annotations

import faulthandler
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from .engine.model import secret

PREFIX = "crash-"  # crash-<date>-<pid>.log: a run's stack file (deleted at a clean exit)
_FATAL = "Fatal Python error: "
_TOLD = "told at the next start"
_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+ in (\S+)', re.M)


def shown_argv(argv: list[str]) -> list[str]:
    """``argv`` with the API key masked (:mod:`~tui.engine.model.secret`): a crash log is shared."""
    secret.collect(argv)
    return [secret.redact(a) for a in argv]


class CrashLog:
    """faulthandler writing to a file in ``folder`` for as long as the app runs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = folder / f"{PREFIX}{stamp}-{os.getpid()}.log"
        self._fh: IO[str] | None = None
        self._was_enabled = False

    def install(self, about: str = "") -> bool:
        """Start writing fatal-signal stacks to :attr:`path`; False (and nothing changed) when
        the folder cannot be written, which never stops the app."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open while the app runs
        except OSError:
            return False
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        shown = " ".join(shown_argv(sys.argv))
        fh.write(f"tokenstep pid {os.getpid()}, started {started}: {shown}\n")
        if about:
            fh.write(secret.redact(about.rstrip("\n")) + "\n")
        fh.write("\n")
        fh.flush()  # faulthandler writes to the descriptor, past Python's buffer
        self._was_enabled = faulthandler.is_enabled()  # e.g. by PYTHONFAULTHANDLER, or pytest
        faulthandler.enable(fh, all_threads=True)
        self._fh = fh
        return True

    def close(self) -> None:
        """A clean end: nothing crashed, so the file goes."""
        if self._fh is None:
            return
        faulthandler.disable()
        if self._was_enabled and sys.__stderr__ is not None:
            faulthandler.enable(sys.__stderr__, all_threads=True)
        self._fh.close()
        self._fh = None
        try:
            self.path.unlink()
        except OSError:
            pass


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _in_llama(block: str) -> bool:
    """The top Python frame of one thread's stack is in llama-cpp-python or tokenstep's engine
    (the Python side of a call into llama.cpp)."""
    m = _FRAME.search(block)
    return m is not None and ("llama_cpp" in m.group(1) or f"tui{os.sep}engine" in m.group(1))


def where(stack: str) -> str:
    """ "llama.cpp" or "native": where faulthandler's stacks put the crash. A Python thread that
    crashed is "Current thread": llama.cpp when its top frame called into it. A crash on a thread
    Python does not know (an OpenMP or ggml worker, as in llama.cpp #20824) has no current
    thread: llama.cpp when a Python thread was inside a call into it (``llama_decode`` waiting
    for its workers)."""
    head, current, rest = stack.partition("Current thread")
    if current:
        return "llama.cpp" if _in_llama(rest.split("\n\n", 1)[0]) else "native"
    blocks = head.split("\nThread ")[1:]
    return "llama.cpp" if any(_in_llama(b.split("\n\n", 1)[0]) for b in blocks) else "native"


def previous_crash(folder: Path) -> str | None:
    """One line about the last run that ended in a fatal signal, or None. Each crash is told
    once (a "told" line is appended to its file). The file of a process still running (another
    tokenstep) is left alone; one of a process that ended without a stack (SIGKILL, a power
    cut) is deleted, since it says nothing."""
    try:
        files = sorted(folder.glob(f"{PREFIX}*.log"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    found: list[tuple[Path, str, str]] = []
    for path in files:
        try:
            pid = int(path.stem.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and _running(pid):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            if _TOLD in text or (pid == os.getpid() and _FATAL not in text):
                continue  # told already; or this process's own file (a container's pid 1
                # is every run's pid: a stack in a file of "ours" is an earlier run's)
            if _FATAL not in text:
                path.unlink()
                continue
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"\n({_TOLD}, {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        except OSError:
            continue
        signal_name = text.split(_FATAL, 1)[1].split("\n", 1)[0].strip()
        found.append((path, signal_name, where(text)))
    if not found:
        return None
    path, signal_name, place = found[-1]
    what = "a crash in llama.cpp" if place == "llama.cpp" else "a native crash"
    more = f" ({len(found) - 1} more in {folder})" if len(found) > 1 else ""
    return f"The last run ended in {what} ({signal_name}); its stack is in {path}{more}."


# The watchdog: reads until the app's byte or EOF; on EOF it restores the terminal.
_GUARD = r"""
import ast, os, signal, sys, termios
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
fd_in, attrs, note = int(sys.argv[1]), ast.literal_eval(sys.argv[2]), sys.argv[3]
screen = False
while True:
    try:
        got = os.read(fd_in, 1)
    except OSError:
        got = b""
    if got != b"s":
        break
    screen = True
if not got:
    try:
        termios.tcsetattr(0, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        pass
    try:
        os.write(1, ((sys.argv[4] if screen else "") + "\r\n" + note + "\r\n").encode())
    except OSError:
        pass
"""
# What Textual's driver turns on and writes back at a normal exit: mouse (1000, 1003, 1015,
# 1006), focus events (1004), bracketed paste (2004), the kitty keyboard protocol, the cursor,
# the alternate screen.
RESTORE = (
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?1004l\x1b[?2004l"
    "\x1b[<u\x1b[?25h\x1b[?1049l"
)


class TerminalGuard:
    """The watchdog process that gives the terminal back if the app dies without doing so."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._w: int | None = None

    def start(self, note: str) -> bool:
        """Start it when standard input and output are a terminal; ``note`` is the line it
        prints after restoring the terminal."""
        try:
            if not (os.isatty(0) and os.isatty(1)):
                return False
            import termios

            attrs = termios.tcgetattr(0)
        except (OSError, ImportError, ValueError):
            return False
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _GUARD, str(r), repr(attrs), note, RESTORE],
                pass_fds=(r,),
                start_new_session=True,  # Ctrl+C and Ctrl+Z in the terminal do not reach it
                stdin=None,
                stdout=None,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            os.close(w)
            return False
        finally:
            os.close(r)
        self._w = w
        return True

    def screen_taken(self) -> None:
        """The app is about to take the screen: a death from now on also needs the escape
        codes (before it, they would only move the cursor)."""
        if self._w is not None:
            try:
                os.write(self._w, b"s")
            except OSError:
                pass

    def release(self) -> None:
        """The app gave the terminal back itself: tell the watchdog to exit without a word."""
        if self._w is None:
            return
        try:
            os.write(self._w, b"x")
        except OSError:
            pass
        os.close(self._w)
        self._w = None
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
