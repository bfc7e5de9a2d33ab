"""``tokenstep compare --chunks`` against llama.cpp's own ``llama-perplexity --kl-divergence``.

Both read the same text with the same ``-c 128 -b 128``: two chunks of 128 tokens, each from
BOS and an empty cache, the rows 64..126 of each compared (126 positions; llama-perplexity
prints its final statistics from 100 on). llama-perplexity runs A once with
``--kl-divergence-base`` (the base file) and B with ``--kl-divergence``; compare runs both in
lockstep. Both use the same llama.cpp kernels on this CPU, so they see the same logits; what
separates their figures is llama-perplexity's storage of A's log-probabilities (16-bit steps of
16/65535 nats over [max − 16, max], the ids under e^-16 left out), against compare's float64
over every id: the issue's bounds (mean KL within 5% relative, same-top within 0.5 points) are
far wider than that rounding, and far narrower than the differences between the cases.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.llama_server import repack_args
from tui.cli import main

TEXT = (Path(__file__).parent / "compare_text.txt").read_text(encoding="utf-8")
N_CTX = 128
COMMON = ["-c", str(N_CTX), "-b", str(N_CTX), "-t", "2"]


def perplexity_binary() -> Path:
    path = Path(sys.prefix) / "llama-server" / "bin" / "llama-perplexity"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    reason = "no llama-perplexity binary beside llama-server (make test builds it)"
    if os.environ.get("CI"):
        pytest.fail(reason + "; CI must build it")
    pytest.skip(reason)


def _run(binary: Path, args: list[str]) -> str:
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    proc = subprocess.run(
        [str(binary), *args, *repack_args(binary)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def parse_kld(log: str) -> dict[str, float]:
    """llama-perplexity's final KL statistics (its "Same top p" in percent)."""
    fields = {
        "kl_mean": r"Mean    KLD:\s+(-?[\d.]+)",
        "kl_max": r"Maximum KLD:\s+(-?[\d.]+)",
        "kl_p99": r"99\.0%   KLD:\s+(-?[\d.]+)",
        "kl_median": r"Median  KLD:\s+(-?[\d.]+)",
        "same_top_pct": r"Same top p:\s+([\d.]+)",
    }
    out = {}
    for key, pat in fields.items():
        m = re.search(pat, log)
        assert m, f"llama-perplexity printed no {key}:\n{log[-3000:]}"
        out[key] = float(m.group(1))
    return out


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compare") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def base(text_file: Path, model_path: Path) -> Path:
    """A's log-probabilities as llama-perplexity stores them (its --kl-divergence-base)."""
    out = text_file.parent / "base.kld"
    _run(
        perplexity_binary(),
        ["-m", str(model_path), "-f", str(text_file), *COMMON, "--kl-divergence-base", str(out)],
    )
    return out


@pytest.fixture(scope="module")
def q8_weights(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Path:
    """A Q8_0 copy made by llama.cpp's own quantizer from the bundled Q4_1 file
    (``allow_requantize``). Requantizing from Q4_1 gives a Q8_0 of the Q4_1 weights, not of
    the original ones: the figures measure Q8_0's rounding of those, not Q8_0 against Q4_1 of
    the same float model."""
    import llama_cpp

    out = tmp_path_factory.mktemp("q8") / "smollm2-q8_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(model_path).encode(), str(out).encode(), params)
    assert rc == 0 and out.is_file()
    return out


def ours(capsys: pytest.CaptureFixture[str], text_file: Path, b: list[str]) -> dict:
    capsys.readouterr()
    rc = main(
        [
            "compare",
            "-f",
            str(text_file),
            *COMMON,
            "-ub",
            str(N_CTX),
            "--chunks",
            "--json",
            "--vs",
            *b,
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    lines = [json.loads(x) for x in out]
    summary = lines[-1]
    assert len(lines) - 1 == summary["n"]  # one line per position, then the summary
    return summary


CASES = {
    "q8_0 KV": ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
    "q4_0 KV": ["-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
    "-ub 1": ["-ub", "1"],
}


def _check(mine: dict, theirs: dict) -> None:
    assert mine["n"] == 2 * (N_CTX - 1 - N_CTX // 2)  # the rows llama-perplexity scores
    assert mine["kl_mean"] > 0.0
    assert abs(mine["kl_mean"] - theirs["kl_mean"]) <= 0.05 * theirs["kl_mean"], (mine, theirs)
    assert abs(100.0 * mine["same_top"] - theirs["same_top_pct"]) <= 0.5, (mine, theirs)


@pytest.mark.parametrize("case", list(CASES))
def test_kl_and_same_top_agree_with_llama_perplexity(
    case: str, capsys: pytest.CaptureFixture[str], text_file: Path, base: Path, model_path: Path
) -> None:
    b = CASES[case]
    theirs = parse_kld(
        _run(
            perplexity_binary(),
            [
                "-m",
                str(model_path),
                *COMMON,
                "--kl-divergence-base",
                str(base),
                "--kl-divergence",
                *b,
            ],
        )
    )
    mine = ours(capsys, text_file, b)
    _check(mine, theirs)
    if case.endswith("KV"):  # a quantized cache takes less memory, and the summary says so
        assert mine["b"]["kv_bytes"] < mine["a"]["kv_bytes"]
        assert mine["b"]["type_k"] == CASES[case][1] and mine["a"]["type_k"] == "f16"


def test_q4_1_against_a_q8_0_requantized_copy_agrees_with_llama_perplexity(
    capsys: pytest.CaptureFixture[str], text_file: Path, base: Path, q8_weights: Path
) -> None:
    theirs = parse_kld(
        _run(
            perplexity_binary(),
            ["-m", str(q8_weights), *COMMON, "--kl-divergence-base", str(base), "--kl-divergence"],
        )
    )
    mine = ours(capsys, text_file, ["-m", str(q8_weights)])
    _check(mine, theirs)
    assert (mine["a"]["label"], mine["b"]["label"]) == ("A: Q4_1 weights", "B: Q8_0 weights")


def test_a_configuration_against_itself_gives_zero_exactly(
    capsys: pytest.CaptureFixture[str], text_file: Path
) -> None:
    mine = ours(capsys, text_file, [])
    assert mine["shared_logits"] is False  # B ran in a context of its own
    assert (mine["kl_mean"], mine["kl_max"], mine["same_top"]) == (0.0, 0.0, 1.0)
    assert mine["first_flip"] is None
