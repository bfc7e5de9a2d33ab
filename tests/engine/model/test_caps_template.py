"""A chat template's work is bounded: its output (a 10^5 × 10^5 loop of literal text reached
955 MB within the 5 s budget, since literal output checks no clock), the range() items it loops
over, and still its time. Each stop is one sentence from the renderer, in a real process whose
peak RSS is measured."""

from __future__ import annotations

import pytest

from tests.support.measured import run_measured
from tui.engine.model.chat_template import Message, TemplateError, render_template

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
LONG = "{% for c in 'x' * 100000 %}{% for d in 'y' * 100000 %}ab{% endfor %}{% endfor %}"
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
    assert m.seconds < 30, m.seconds


def test_a_real_template_still_renders_its_messages():
    tmpl = "{% for i in range(messages|length) %}{{ messages[i].content }};{% endfor %}"
    many = [Message("user", f"m{i}") for i in range(10_000)]
    assert render_template(tmpl, many) == "".join(f"m{i};" for i in range(10_000))
    with pytest.raises(TemplateError, match="output passed"):
        render_template("{{ messages[0].content }}" * 2, [Message("user", "x" * 9_000_000)])
