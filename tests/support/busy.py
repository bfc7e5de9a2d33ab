"""A loaded machine made by the test itself: one spinning child per core of a 2-core machine,
so the moments a signal lands in do not depend on what else runs beside the suite."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def spinning(n: int = 2) -> Iterator[None]:
    """``n`` busy loops for the block, killed and reaped after it."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()
