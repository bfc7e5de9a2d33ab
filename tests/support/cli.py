"""Running ``python -m tui`` as a user would, and checking its one-sentence errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tui.args import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, stdin: bytes | None = None, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m tui ARGS`` as a user would, capturing bytes (``env``: added variables)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tui", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


# Commands that take the sampler and context flags and a prompt.
PROMPT_COMMANDS = ["trace", *(["verify"] if "verify" in COMMANDS else [])]


def one_sentence(res: subprocess.CompletedProcess, *needles: str) -> str:
    """Assert a clean failure and return the message (without the 'tokenstep: ' prefix)."""
    err = res.stderr.decode("utf-8")
    assert res.returncode == 1, (res.returncode, err)
    assert "Traceback" not in err
    assert res.stdout == b"", res.stdout[:200]
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("tokenstep: ") and line.endswith("."), line
    assert "\x1b" not in line
    msg = line.removeprefix("tokenstep: ")
    for n in needles:
        assert n in msg, (n, msg)
    return msg
