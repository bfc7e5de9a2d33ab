"""``trace`` says why it stopped before -n tokens; -p and -f together are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import PROMPT_COMMANDS, one_sentence, run_cli


def test_a_full_context_says_why_it_stopped() -> None:
    """As reported: 8 records, exit 0 and nothing on stderr. The exit code stays 0 (stopping
    at a full context is the loop's rule); stderr says why, in one line."""
    res = run_cli("trace", "-c", "8", "--context-full", "stop", "-n", "60", "-p", "hi")
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.decode().splitlines()]
    assert len(records) < 60
    err = res.stderr.decode().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("tokenstep: stopped after ") and "of -n 60 tokens" in err[0]
    assert "context full (8 of -c 8 tokens)" in err[0] and "--context-full shift" in err[0]


def test_all_tokens_made_is_silent() -> None:
    res = run_cli("trace", "-n", "3", "-p", "hi", "--temp", "0")
    assert res.returncode == 0 and res.stderr == b"", res.stderr


@pytest.mark.parametrize("cmd", PROMPT_COMMANDS)
def test_prompt_and_file_together_are_refused(cmd: str, tmp_path: Path) -> None:
    """-f used to win silently over -p."""
    f = tmp_path / "prompt.txt"
    f.write_text("from the file")
    one_sentence(run_cli(cmd, "-p", "hi", "-f", str(f), "-n", "1"), "-p and -f both")
