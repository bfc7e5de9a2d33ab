"""``python -m tui`` in a child with its wall time and peak memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest

from tests.support.cli import ROOT, one_sentence

LIMIT_AS = 4 << 30  # bytes of address space a capped run may map


@dataclass
class Measured:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_mib: float
    cpu_seconds: float = 0.0  # user + system CPU of the process: what a loaded machine leaves alone


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


# Runs ``-m MODULE ARGS`` or ``-c CODE ARGS`` as python would, then writes the process's own
# peak RSS (VmHWM, in kB) to $TOKENSTEP_TEST_HWM: at a normal end, sys.exit or an exception.
_LAUNCH = """
import os, runpy, sys
hwm = os.environ.pop("TOKENSTEP_TEST_HWM")
how, what, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    if how == "-m":
        sys.argv = ["tokenstep", *rest]
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
finally:
    with open("/proc/self/status") as fh, open(hwm, "w") as out:
        out.write(next(line for line in fh if line.startswith("VmHWM:")).split()[1])
"""


def run_measured(*args: str, timeout: float = 120, module: bool = True) -> Measured:
    """``python -m tui ARGS`` (``python ARGS`` with ``module=False``, ARGS then starting with
    ``-c CODE``) with its wall time and its own peak RSS (VmHWM; where the process ended
    without writing it, the rusage of the child, which can only be larger)."""
    if module:
        args = ("-m", "tui", *args)
    assert args[0] in ("-m", "-c"), args
    hwm = tempfile.NamedTemporaryFile(delete=False)
    hwm.close()
    os.unlink(hwm.name)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "TOKENSTEP_TEST_HWM": hwm.name}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=ROOT,
            env=env,
            preexec_fn=_limit,
        )
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"tokenstep {' '.join(args)[:80]} ran for more than {timeout} s")
            time.sleep(0.02)
        seconds = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        peak = usage.ru_maxrss / 1024
        if os.path.exists(hwm.name):
            with open(hwm.name) as fh:
                peak = int(fh.read()) / 1024
            os.unlink(hwm.name)
        cpu = usage.ru_utime + usage.ru_stime
        return Measured(proc.returncode, out.read(), err.read(), seconds, peak, cpu)


def refused(m: Measured, *needles: str, seconds: float = 30, mib: float = 400) -> str:
    """One sentence, exit 1, within ``seconds`` and ``mib`` (a refusal before the model loads
    takes about 0.3 s and 60 MiB; the bounds leave room for a loaded machine)."""
    res = subprocess.CompletedProcess([], m.returncode, m.stdout, m.stderr)
    msg = one_sentence(res, *needles)
    assert m.seconds < seconds, m.seconds
    assert m.peak_mib < mib, m.peak_mib
    return msg


def sampled(m: Measured) -> list[int]:
    """The token ids the trace's records picked."""
    rows = [json.loads(line) for line in m.stdout.decode().splitlines() if line.strip()]
    return [r["sampled"]["id"] for r in rows if r.get("sampled")]
