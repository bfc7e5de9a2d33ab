"""Hostile numbers in a model's header, and hostile chat templates that are merely huge.

llama.cpp trusts a GGUF's hyperparameters and aborts the process (GGML_ASSERT, exit 134)
when one is impossible. Each case here is built the way a stranger would build it: a copy of
the bundled model with one value rewritten, and the bare llama.cpp load shows the abort that
tokenstep's header check prevents.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import one_sentence, run_cli
from tests.support.gguf_writer import WriteGGUF, write_gguf  # noqa: F401  (the fixture)
from tests.support.resume_files import write_resume
from tui.engine import Model, ModelError

EPS_KEY = b"llama.attention.layer_norm_rms_epsilon"


def _rewrite_eps(src: Path, dst: Path, value: float) -> None:
    """Change the float32 after the epsilon key in the header, byte for byte."""
    data = bytearray(src.read_bytes())
    at = data.index(EPS_KEY) + len(EPS_KEY)
    (vtype,) = struct.unpack_from("<I", data, at)
    assert vtype == 6  # GGUF_TYPE_FLOAT32
    struct.pack_into("<f", data, at + 4, value)
    dst.write_bytes(bytes(data))


def _bare_decode_aborts(path: Path) -> int:
    """Load the file with llama.cpp alone and decode one token: the return code."""
    code = (
        "import llama_cpp, sys\n"
        "m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(),"
        " llama_cpp.llama_model_default_params())\n"
        "ctx = llama_cpp.llama_init_from_model(m, llama_cpp.llama_context_default_params())\n"
        "tok = (llama_cpp.llama_token * 1)(1)\n"
        "llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tok, 1))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "GGML_NO_BACKTRACE": "1"},
    )
    return res.returncode


def test_nan_norm_epsilon_is_refused_before_the_first_decode(
    model_path: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "nan_eps.gguf"
    _rewrite_eps(model_path, bad, math.nan)
    assert _bare_decode_aborts(bad) < 0  # llama.cpp: GGML_ASSERT(eps >= 0.0f), SIGABRT
    for cmd in (("trace", "-p", "hi", "-n", "1"), ("info",)):
        one_sentence(run_cli(*cmd, "-m", str(bad)), "layer_norm_rms_epsilon", "not a finite")
    with pytest.raises(ModelError, match="not a finite number"):
        Model(bad)


def test_resume_file_pointing_at_a_nan_model_is_one_sentence(
    model_path: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "nan_eps.gguf"
    _rewrite_eps(model_path, bad, math.nan)
    session = write_resume(tmp_path / "s.jsonl", bad)
    one_sentence(run_cli("--resume", str(session)), "not a finite number")


def test_negative_epsilon_and_bad_rope_base_are_refused(write_gguf: WriteGGUF) -> None:  # noqa: F811
    neg = write_gguf("neg_eps.gguf", {"llama.attention.layer_norm_rms_epsilon": -1e-5})
    one_sentence(run_cli("trace", "-p", "hi", "-m", str(neg)), "negative", "epsilon")
    inf = write_gguf("inf_rope.gguf", {"llama.rope.freq_base": math.inf})
    one_sentence(run_cli("trace", "-p", "hi", "-m", str(inf)), "rope.freq_base")
    zero = write_gguf("zero_rope.gguf", {"llama.rope.freq_base": 0.0})
    one_sentence(run_cli("trace", "-p", "hi", "-m", str(zero)), "rope base must be positive")


def test_huge_chat_template_is_refused_at_once(write_gguf: WriteGGUF) -> None:  # noqa: F811
    """A 14 MB template used to take 90 s of CPU and 673 MB in Jinja2's parser before one
    sentence came: its size is now checked before it is parsed."""
    path = write_gguf("huge_template.gguf", {"tokenizer.chat_template": "{{ 1 }}" * 2_000_000})
    msg = one_sentence(run_cli("trace", "--chat", "-p", "hi", "-n", "1", "-m", str(path)))
    assert "14,000,000 characters" in msg
