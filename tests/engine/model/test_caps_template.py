"""A chat template's work is bounded: its output (a 10^5 × 10^5 loop of literal text reached
955 MB within the 5 s budget, since literal output checks no clock), the range() items it loops
over, and its thread's CPU time. Each stop is one sentence from the renderer, in a real process
whose peak RSS and CPU time are measured. The budget counts CPU, not wall time: on a machine
at load 12 a wall-clock budget stopped the output loop by its time instead of its size."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.measured import run_measured
from tui.engine.model.chat_template import Message, TemplateError, render_template

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
LONG = "{% for c in 'x' * 100000 %}{% for d in 'y' * 100000 %}ab{% endfor %}{% endfor %}"
SILENT = "{% for c in 'x' * 100000 %}{% for d in 'y' * 100000 %}{% endfor %}{% endfor %}"
RENDER = """
import sys
from tui.engine.model.chat_template import Message, TemplateError, render_template
try:
    render_template(sys.argv[1], [Message("user", "hi")])
except TemplateError as e:
    sys.exit(str(e))
"""


@pytest.mark.parametrize(
    ("template", "words"),
    [(LOOP, "more than 1,000,000 range() items"), (LONG, "output passed 16,777,216 characters")],
    ids=["range-loop", "string-loop"],
)
def test_a_template_that_outputs_without_end_is_stopped_in_bounded_memory(template, words):
    m = run_measured("-c", RENDER, template, module=False, timeout=60)
    err = m.stderr.decode()
    assert m.returncode == 1 and "Traceback" not in err, err[-400:]
    assert err.count("\n") == 1 and words in err, err
    assert m.peak_mib < 250, m.peak_mib  # the old tree: 955 MB
    assert m.cpu_seconds < 30, m.cpu_seconds


@contextmanager
def busy(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPU for the duration: the machine made loaded."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()


def test_a_loaded_machine_stops_the_same_template_at_the_same_limit():
    with busy(4):  # twice the cores CI has: a wall-clock budget ran out here before the output
        m = run_measured("-c", RENDER, LONG, module=False, timeout=600)
    err = m.stderr.decode()
    assert m.returncode == 1 and err.count("\n") == 1, err[-400:]
    assert "output passed 16,777,216 characters" in err, err


def test_a_template_that_loops_without_output_is_stopped_by_its_cpu_budget():
    m = run_measured("-c", RENDER, SILENT, module=False, timeout=600)
    err = m.stderr.decode()
    assert m.returncode == 1 and err.count("\n") == 1, err[-400:]
    assert "ran for more than 5 seconds of CPU" in err, err
    assert 5 <= m.cpu_seconds < 30, m.cpu_seconds  # the budget, plus start-up and one tick


def test_a_real_template_still_renders_its_messages():
    tmpl = "{% for i in range(messages|length) %}{{ messages[i].content }};{% endfor %}"
    many = [Message("user", f"m{i}") for i in range(10_000)]
    assert render_template(tmpl, many) == "".join(f"m{i};" for i in range(10_000))
    with pytest.raises(TemplateError, match="output passed"):
        render_template("{{ messages[0].content }}" * 2, [Message("user", "x" * 9_000_000)])
