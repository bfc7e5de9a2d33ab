"""The check behind "fixtures stop what they start" (tests/support/processes.py, run by conftest.py
after every module and at the session's end) finds a server left running, whether a helper
noted it or not, and stops it; a process that merely ran is not one."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import left_running, stop_all, track

SLEEP = "import time; time.sleep(120)"


def test_a_noted_server_and_one_found_by_its_command_line_are_found_and_stopped():
    noted = track(subprocess.Popen([sys.executable, "-c", SLEEP]), "a noted server")
    # not noted: found because it is under pytest and its command line names llama-server
    unnoted = subprocess.Popen([sys.executable, "-c", SLEEP, "llama-server"])
    other = subprocess.Popen([sys.executable, "-c", SLEEP])  # no server: not counted
    try:
        left = left_running()
        assert left.get(noted.pid) == "a noted server"
        assert unnoted.pid in left and "llama-server" in left[unnoted.pid]
        assert other.pid not in left
        stop_all(left)
        assert noted.poll() is not None
        assert unnoted.wait(30) is not None
        assert left_running() == {}
    finally:
        for p in (noted, unnoted, other):
            p.kill()
            p.wait(30)


def test_a_server_that_ended_is_not_counted():
    done = track(subprocess.Popen([sys.executable, "-c", "pass"]), "a server that ended")
    done.wait(30)
    assert done.pid not in left_running()
