"""-b smaller than the number of sequences: llama.cpp aborts the process inside
``llama_init_from_model`` (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)); tokenstep
refuses it in one sentence, everywhere a context is made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import one_sentence, run_cli
from tests.support.resume_files import write_resume
from tui.engine import default_model_path

NEEDLE = "-b/--batch-size must be at least 2"


def test_bare_llama_cpp_aborts_on_it() -> None:
    code = (
        "import llama_cpp, sys\n"
        "m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(),"
        " llama_cpp.llama_model_default_params())\n"
        "p = llama_cpp.llama_context_default_params()\n"
        "p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 256, 1, 1, 2\n"
        "llama_cpp.llama_init_from_model(m, p)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(default_model_path())],
        capture_output=True,
        timeout=120,
        env={**os.environ, "GGML_NO_BACKTRACE": "1"},
    )
    assert res.returncode < 0 and b"n_outputs_max" in res.stderr


def test_every_command_refuses_it() -> None:
    for args in (
        ("trace", "-p", "hi", "-n", "2", "-b", "1", "-ub", "1"),
        ("trace", "-p", "hi", "-n", "0", "-b", "1", "-ub", "1"),
        ("trace", "-p", "hi", "-n", "2", "-b", "1", "-ub", "1", "-fa", "off"),
        ("verify", "-p", "hi", "-n", "2", "-b", "1", "-ub", "1"),
        ("-b", "1", "-ub", "1"),
    ):
        one_sentence(run_cli(*args), NEEDLE)
    res = run_cli("trace", "-p", "hi", "-n", "2", "-b", "2", "-ub", "1")
    assert res.returncode == 0, res.stderr


def test_a_resume_file_with_it_is_refused(tmp_path: Path) -> None:
    path = write_resume(tmp_path / "s.jsonl", default_model_path(), config={"n_batch": 1, "n_ubatch": 1})
    one_sentence(run_cli("--resume", str(path)), NEEDLE)
