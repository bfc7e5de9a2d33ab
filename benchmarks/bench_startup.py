"""Benchmark 6: from launching ``tokenstep`` to its first interactive frame (the chat box's
placeholder on screen), in a pseudo-terminal of 120x40, against a bare start (Python,
llama_cpp imported, the model loaded and a context created), alternating."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from .common import Row, median

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
READY = b"Type a message"
BARE = (
    "import llama_cpp\n"
    "from tui.engine import Model, default_model_path\n"
    "m = Model()\n"
    "p = llama_cpp.llama_context_default_params(); p.n_ctx = 4096\n"
    "ctx = llama_cpp.llama_init_from_model(m.ptr, p)\n"
    "print('Type a message', flush=True)\n"
)


def _until_ready(argv: list[str], timeout: float = 60.0) -> float:
    """Seconds from spawning ``argv`` on a pty until READY appears in its output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", LINES="40")
    env.pop("TEXTUAL", None)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "tokenstep-bench-home"
    env["TOKENSTEP_AUTOSAVE_DIR"] = str(tmp)  # keep autosaves out of the user's directory
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, start_new_session=True
    )
    os.close(slave)
    buf = b""
    took = float("nan")
    try:
        while time.perf_counter() - t0 < timeout:
            r, _, _ = select.select([master], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                buf += chunk
                if READY in buf:
                    took = time.perf_counter() - t0
                    break
            elif proc.poll() is not None:
                break
    finally:
        try:
            os.write(master, b"\x11")  # ctrl+q
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(master)
    if took != took:
        raise RuntimeError(f"{argv[0]} never showed its first frame: {buf[-300:]!r}")
    return took


def run(rounds: int = 5) -> list[Row]:
    ours, bare = [], []
    app = [str(BIN / "tokenstep")]
    plain = [sys.executable, "-c", BARE]
    _until_ready(plain)  # warm the page cache
    for _ in range(rounds):
        ours.append(_until_ready(app))
        bare.append(_until_ready(plain))
    o, b = median(ours), median(bare)
    return [
        Row(
            "6. start-up to first frame",
            f"{o:.2f} s",
            "< 1.5 s",
            o < 1.5,
            f"bare (import, load, context): {b:.2f} s; medians of {rounds}",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
