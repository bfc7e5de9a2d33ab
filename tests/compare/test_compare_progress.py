"""``tokenstep compare`` on a terminal while it runs: a progress line on stderr (overwritten in
place, erased at the end), no echo of the keys typed meanwhile, and Ctrl-C ending with one
sentence and exit code 130. The pty tests run the real command in a real pseudo-terminal (as
tests/app/test_paste_pty.py does) on the bundled model: two chunks of tests/compare/compare_text.txt with
B at ``-ub 1``, 126 positions."""

from __future__ import annotations

import io
import os
import signal
import termios
import time
from pathlib import Path

import pytest

from tests.support.compare_records import counted
from tests.support.pty import Terminal
from tui.compare.progress import Progress, quiet_keys

TEXT = Path(__file__).parent / "compare_text.txt"
FLAGS = ("compare", "-f", str(TEXT), "-c", "128", "-b", "128", "-ub", "128", "--chunks")
FLAGS += ("--text", "--vs", "-ub", "1")
START = b"compare: 0 of 126 positions"
PGDN = b"\x1b[6~"
PROMPT = "The cat sat on the mat because it was warm, and the sun was shining on it all day."


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_line_counts_in_place_at_most_every_tenth_of_a_second_and_is_erased():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, clock)
    p.step()  # before the total is known: nothing
    assert out.getvalue() == ""
    p.start(1229)
    for _ in range(339):
        p.step()  # no time passes: none of these is drawn
    clock.t += 12.0
    p.step()
    assert out.getvalue() == (
        "\rcompare: 0 of 1,229 positions, 0 s\x1b[K\rcompare: 340 of 1,229 positions, 12 s\x1b[K"
    )
    for _ in range(889):
        p.step()  # the last is drawn whatever the clock says
    assert out.getvalue().endswith("\rcompare: 1,229 of 1,229 positions, 12 s\x1b[K")
    p.clear()
    assert out.getvalue().endswith("\r\x1b[K") and "\n" not in out.getvalue()


def test_the_ticker_runs_the_seconds_on_while_no_position_arrives_and_stops_with_clear():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, clock, tick=0.01)
    p.start(1229)
    clock.t += 5.0  # a long window: no position for 5 s
    deadline = time.monotonic() + 60
    while "compare: 0 of 1,229 positions, 5 s" not in out.getvalue():
        assert time.monotonic() < deadline, out.getvalue()
        time.sleep(0.01)
    p.clear()
    assert p.ticker is not None and not p.ticker.is_alive()
    assert out.getvalue().endswith("\r\x1b[K")


def test_quiet_keys_leaves_a_stream_that_is_not_a_terminal_alone():
    with quiet_keys(io.StringIO()):
        pass


def echo_on(fd: int) -> bool:
    """Whether the pty echoes (its two ends share one set of terminal settings)."""
    return bool(termios.tcgetattr(fd)[3] & termios.ECHO)


@pytest.mark.parametrize("interrupt", [False, True], ids=["to the end", "ctrl-c"])
def test_on_a_terminal_it_shows_progress_hides_typed_keys_and_ctrl_c_says_one_sentence(
    tmp_path, interrupt
):
    term = Terminal(tmp_path, *FLAGS, cols=120, rows=30)
    try:
        assert echo_on(term.master)
        term.until(START, "the progress line once the models are loaded")
        assert not echo_on(term.master)  # the run is still on its first decode
        since = term.mark()
        term.write(PGDN)  # a key typed during the run: echo would return it at once
        if interrupt:
            os.killpg(term.proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground
            term.until(b"interrupted", "the sentence for Ctrl-C", since)
            assert term.proc.wait(120) == 130
        else:
            term.until(b"compare: 126 of 126 positions", "the last count", since)
            term.until(b"\r\x1b[K-ub 1, top-1 differs at", "the line erased, then the table")
            assert term.proc.wait(120) == 0
        assert echo_on(term.master)  # restored, however the run ended
        with term._lock:
            out = bytes(term.out)
        assert PGDN not in out[since:] and b"^[[6~" not in out
        assert b"Traceback" not in out
    finally:
        term.close()


def test_json_lines_on_a_terminal_get_no_progress_line_between_them(tmp_path):
    flags = ("compare", "-p", PROMPT, "--json", "--vs", "-ub", "1")
    term = Terminal(tmp_path, *flags, cols=120, rows=30)
    try:
        term.until(b'"kl_mean"', "the summary object")
        assert term.proc.wait(120) == 0
        with term._lock:
            out = bytes(term.out)
        assert b"compare: " not in out and out.count(b'"position"') > 10
    finally:
        term.close()


@pytest.mark.parametrize(
    "flags",
    [
        ["-p", PROMPT, "--vs", "-ub", "1"],
        ["-f", str(TEXT), "-c", "128", "-b", "128", "--chunks", "--vs", "-ub", "1"],
        ["-p", "Once upon a time", "--free", "-n", "8", "--vs", "-s", "7"],
    ],
    ids=["teacher", "chunks", "free"],
)
def test_each_run_announces_how_many_positions_it_will_compare(flags):
    totals, n = counted(["-t", "2", *flags])
    assert totals == [n]  # once, before the first; free: -n 8, no end-of-text in 8 picks


def test_a_kld_base_run_announces_its_total_writing_and_reading(tmp_path):
    base = ["-t", "2", "-p", PROMPT, "--kld-base", str(tmp_path / "a.kld")]
    written = counted([*base, "--vs", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
    read = counted([*base, "--vs", "-ub", "1"])
    assert written == read and written[0] == [written[1]]
