"""``tokenstep tokenize`` (issue 24: tokenize a text without decoding it, as llama-tokenize
does), against llama-cpp-python's own ``Llama.tokenize`` on the same GGUF file."""

from __future__ import annotations

import json

import pytest
from llama_cpp import Llama

from tests.support.cli import run_cli
from tui.engine.model.tokens import display_bytes

TEXTS = ("The cat sat", "naïve café — 東京\nnew line\tand a tab", "x <|im_end|> y", " a\u00a0b  ")


@pytest.fixture(scope="module")
def oracle(model_path):
    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    yield llm
    llm.close()


def _lines(res) -> list[str]:
    assert res.returncode == 0, res.stderr
    return res.stdout.decode("utf-8").splitlines()


@pytest.mark.parametrize("text", TEXTS)
def test_ids_and_pieces_are_llamas(oracle, text):
    want = oracle.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    (ids,) = _lines(run_cli("tokenize", "--ids", text))
    assert json.loads(ids) == want
    (pieces,) = _lines(run_cli("tokenize", "--pieces", text))
    assert json.loads(pieces) == [display_bytes(oracle.detokenize([t], special=True)) for t in want]
    rows = _lines(run_cli("tokenize", text, "--show-count"))
    assert rows[-1] == f"Total number of tokens: {len(want)}"
    assert [int(r.split(" -> ")[0]) for r in rows[:-1]] == want


def test_special_text_and_files(oracle, tmp_path):
    text = "x <|im_end|> y"
    want = oracle.tokenize(text.encode(), add_bos=True, special=True)
    (ids,) = _lines(run_cli("tokenize", "--ids", "--parse-special", text))
    assert json.loads(ids) == want and len(want) < len(oracle.tokenize(text.encode()))
    f = tmp_path / "t.txt"
    f.write_bytes(b"two lines\nkept verbatim\n")
    (ids,) = _lines(run_cli("tokenize", "--ids", "-f", str(f)))
    assert json.loads(ids) == oracle.tokenize(f.read_bytes(), add_bos=True)
    (ids,) = _lines(run_cli("tokenize", "--ids", "--stdin", stdin=b"from stdin"))
    assert json.loads(ids) == oracle.tokenize(b"from stdin", add_bos=True)
    (ids,) = _lines(run_cli("tokenize", "--ids", "-p", "-", stdin=b"dash p"))
    assert json.loads(ids) == oracle.tokenize(b"dash p", add_bos=True)


def test_a_newline_piece_stays_on_its_line():
    rows = _lines(run_cli("tokenize", "a\nb"))
    assert "'\\n'" in rows[1] and len(rows) == 3


@pytest.mark.parametrize(
    "argv",
    [
        ("tokenize",),
        ("tokenize", "x", "-f", "y"),
        ("tokenize", "-f", "/nonexistent"),
        ("tokenize", "--ids", "--pieces", "x"),
        ("tokenize", "-m", "/nonexistent.gguf", "x"),
    ],
)
def test_bad_input_gets_one_sentence(argv):
    res = run_cli(*argv)
    assert res.returncode == 1 and res.stdout == b""
    err = res.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("tokenstep: ") and "Traceback" not in err


def test_no_bos_on_a_model_that_adds_one(tmp_path):
    """SmolLM2 adds no BOS; the tiny SPM model written in tests/support/swa_model.py does."""
    from tests.support.swa_model import write_swa_model

    path = write_swa_model(tmp_path / "bos.gguf")
    llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        with_bos = llm.tokenize(b"hi there", add_bos=True)
        without = llm.tokenize(b"hi there", add_bos=False)
    finally:
        llm.close()
    assert with_bos[0] == 1 and with_bos[1:] == without
    (ids,) = _lines(run_cli("tokenize", "-m", str(path), "--ids", "hi there"))
    assert json.loads(ids) == with_bos
    (ids,) = _lines(run_cli("tokenize", "-m", str(path), "--ids", "--no-bos", "hi there"))
    assert json.loads(ids) == without
