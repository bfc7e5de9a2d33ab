"""Text is bounded by what the context can hold (issue 37, item 6): a file, standard input, a
chat message or a resume file's message over ``text_size.max_bytes`` is refused in one sentence
before it is tokenized whole. Each CLI case measures the process's own peak RSS (VmHWM) for a
10 MB input: refused first, it stays far under 300 MB (tokenizing it whole took 1.3 to 2.7 GB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input

from tests.support.app import SIZE, run_async, wait_for
from tests.support.cli import ROOT
from tests.support.resume_files import write_resume
from tests.support.scripted_server import run_measured
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.model import text_size
from tui.engine.model.errors import TokenstepError
from tui.worker import Worker
from tui.worker.commands import Send

TEN_MB = 10 * 10**6
PEAK_MB = 300


def test_the_bound_is_a_context_worth_of_bytes_with_a_floor():
    assert text_size.max_bytes(512) == text_size.FLOOR_BYTES == 1 << 20
    assert text_size.max_bytes(1 << 20) == 32 << 20
    with pytest.raises(text_size.TokenstepError, match="more than a context of 4,096 tokens"):
        text_size.check("this text", (1 << 20) + 1, 4096)
    text_size.check("this text", 1 << 20, 4096)  # the bound itself passes


def test_the_margin_over_real_text_and_the_longest_pieces(make_engine):
    """Prose averages far under the bound (the README: 3.2 bytes a token), and the floor
    covers the vocabulary's longest piece at the default -c: a text refused there is more
    bytes than 4,096 of SmolLM2's longest tokens could hold."""
    eng = make_engine()
    text = (ROOT / "README.md").read_bytes()
    ids = eng.vocab.tokenize(text.decode("utf-8"), add_special=False)
    assert len(text) / len(ids) * 4 < text_size.BYTES_PER_TOKEN  # a margin of 4 at least
    longest = max(len(eng.vocab.piece(t)) for t in range(eng.info.n_vocab))
    assert longest * 4096 < text_size.max_bytes(4096)


def _big(tmp_path: Path) -> Path:
    path = tmp_path / "big.txt"
    path.write_bytes(b"The cat sat on the mat. " * (TEN_MB // 24 + 1))
    return path


def _refused(code: int, err: str, mb: float, *needles: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err and err.startswith("tokenstep: ") and err.count("\n") == 1, err
    for n in needles:
        assert n in err, (n, err)
    assert 0 < mb < PEAK_MB, mb


def test_tokenize_of_a_10_mb_file_is_refused_before_tokenizing(tmp_path):
    code, err, _s, mb = run_measured("tokenize", "-f", str(_big(tmp_path)))
    _refused(code, err, mb, "more than a context of 8,192 tokens can hold", "shorten it")


def test_tokenize_of_10_mb_on_standard_input_is_refused(tmp_path):
    big = _big(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    with open(big, "rb") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "tui", "tokenize", "--stdin"],
            stdin=fh, capture_output=True, cwd=ROOT, env=env, timeout=120,
        )
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "the text on standard input is more than" in err, err
    assert proc.stdout == b""


def test_trace_of_a_10_mb_prompt_file_is_refused_before_tokenizing(tmp_path):
    code, err, _s, mb = run_measured("trace", "-f", str(_big(tmp_path)), "-n", "1", "-c", "512")
    _refused(code, err, mb, "the prompt file", "more than a context of 512 tokens can hold")


def test_resume_of_a_10_mb_message_is_refused_before_tokenizing(tmp_path, model_path):
    path = write_resume(tmp_path / "big.jsonl", model_path)
    header = json.loads(path.read_text(encoding="utf-8"))
    header["conversation"] = [{"role": "user", "content": "cat " * (TEN_MB // 4)}]
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    code, err, _s, mb = run_measured("--resume", str(path))
    _refused(code, err, mb, "cannot be resumed: its conversation is", "can hold")


def test_a_resume_file_whose_first_line_is_endless_is_refused(tmp_path):
    from tui.worker.resume import MAX_HEADER_CHARS, load_header

    path = tmp_path / "long.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"tokenstep_session": 1, "x": "')
        fh.write("a" * (MAX_HEADER_CHARS + 10))
    with pytest.raises(text_size.TokenstepError, match="first line is longer than 64 MiB"):
        load_header(path)


def test_a_chat_message_larger_than_the_context_holds_is_refused_and_given_back(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    w = Worker(eng, raw=False, autoplay=False, autosave_dir=None, close_engine=False)
    text = "word " * ((2 << 20) // 5)  # 2 MiB: over the 1 MiB floor
    with pytest.raises(TokenstepError, match="this message is at least 2.0 MiB, more than a "
                       "context of 512 tokens can hold"):
        w.handle(Send(text))  # the worker's guard makes it the notice line's sentence
    assert w.state.returned_text == text  # the chat box gets it back: nothing is lost
    assert eng.n_past == 0


@run_async
async def test_a_paste_larger_than_the_context_holds_is_refused_before_the_box_takes_it(
    make_engine, tmp_path
):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    app = TokenstepApp(eng, autosave_dir=tmp_path / "autosave", close_engine=False, autoplay=False)
    pasted = "The cat sat on the mat. " * ((2 << 20) // 24)  # 2 MiB: over the 1 MiB floor
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one("#chat", Input)
        await wait_for(pilot, lambda: app.view is not None, "the first view")
        chat.post_message(events.Paste(pasted))
        await wait_for(pilot, lambda: bool(app._notifications), "the refusal")
        said = [n.message for n in app._notifications]
        assert any(
            "This paste is at least 2.0 MiB, more than a context of 512 tokens can hold" in m
            for m in said
        ), said
        assert chat.value == ""  # nothing pasted, nothing to tokenize
        chat.post_message(events.Paste("a short paste"))
        await wait_for(pilot, lambda: chat.value == "a short paste", "a paste that fits")
