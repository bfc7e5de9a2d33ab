"""Bad input, from the command line: one sentence on stderr, a non-zero exit, no traceback.

Every case runs ``python -m tui ...`` in a subprocess, as a user would, and checks the exit
code, that stdout is empty, and that stderr is exactly one line holding one sentence.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp import Llama

from tests.support.cli import PROMPT_COMMANDS, ROOT, one_sentence, run_cli
from tui.args import COMMANDS
from tui.engine.model import gguf_header

# Every command that takes -m: trace, info, the app itself (it checks the model before the
# UI starts), and verify once it exists.
MODEL_COMMANDS = [("trace", "-p", "hi", "-n", "1"), ("info",), ()]
if "verify" in COMMANDS:
    MODEL_COMMANDS.append(("verify", "-p", "hi", "-n", "1"))
IDS = [c[0] if c else "app" for c in MODEL_COMMANDS]


@pytest.fixture(scope="session")
def bad_models(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> dict[str, Path]:
    """Broken model files made once per session from the bundled model."""
    d = tmp_path_factory.mktemp("bad_models")
    data = model_path.read_bytes()
    files = {
        "not_gguf": d / "notes.gguf",
        "truncated": d / "half.gguf",
        "unknown_arch": d / "zzzzz.gguf",
        "dir": d / "a_directory.gguf",
    }
    files["not_gguf"].write_text("this is a text file, not a model\n")
    files["truncated"].write_bytes(data[: len(data) // 2])
    # general.architecture is a length-prefixed string: swap 'llama' for another 5 letters.
    key = b"general.architecture"
    old = len(key).to_bytes(8, "little") + key + (8).to_bytes(4, "little")
    old += (5).to_bytes(8, "little") + b"llama"
    assert data.count(old) == 1
    files["unknown_arch"].write_bytes(data.replace(old, old[:-5] + b"zzzzz"))
    files["dir"].mkdir()
    return files


# -- model paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_missing_model(cmd: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    one_sentence(run_cli(*cmd, "-m", str(path)), "not found", str(path))


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_directory_as_model(cmd: tuple[str, ...], bad_models: dict[str, Path]) -> None:
    one_sentence(run_cli(*cmd, "-m", str(bad_models["dir"])), "is a directory")


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_not_gguf(cmd: tuple[str, ...], bad_models: dict[str, Path]) -> None:
    one_sentence(run_cli(*cmd, "-m", str(bad_models["not_gguf"])), "not a GGUF file")


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_truncated_gguf(
    cmd: tuple[str, ...], bad_models: dict[str, Path], model_path: Path
) -> None:
    path = bad_models["truncated"]
    msg = one_sentence(run_cli(*cmd, "-m", str(path)), "is truncated")
    # The numbers are the real ones: the full file's size and the half we kept.
    assert f"{model_path.stat().st_size:,}" in msg
    assert f"{path.stat().st_size:,}" in msg


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_unknown_architecture(cmd: tuple[str, ...], bad_models: dict[str, Path]) -> None:
    path = bad_models["unknown_arch"]
    assert gguf_header.validate(path).arch == "zzzzz"  # only the architecture is wrong
    one_sentence(run_cli(*cmd, "-m", str(path)), "unknown model architecture", "'zzzzz'")


def _no_dac_override() -> list[str]:
    """A command prefix under which chmod 000 really denies reading.

    Tests often run as root, and root reads any file (CAP_DAC_OVERRIDE). setpriv drops that
    capability for the child, so the file is as unreadable as it would be for a user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: root can read a chmod 000 file")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--"]


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=IDS)
def test_unreadable_model(cmd: tuple[str, ...], tmp_path: Path, model_path: Path) -> None:
    prefix = _no_dac_override()
    path = tmp_path / "locked.gguf"
    with model_path.open("rb") as f:
        path.write_bytes(f.read(4096))
    path.chmod(0)
    res = subprocess.run(
        [*prefix, sys.executable, "-m", "tui", *cmd, "-m", str(path)],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    one_sentence(res, "cannot read model file", "permission denied")


def test_model_path_too_long() -> None:
    one_sentence(run_cli("info", "-m", "x" * 5000), "cannot open model file", "too long")


def test_device_as_model() -> None:
    one_sentence(run_cli("info", "-m", "/dev/null"), "not a regular file")


# -- flag values ---------------------------------------------------------------------------

FLAG_CASES = [
    (("-c", "0"), "-c/--ctx-size must be at least"),
    (("--top-p", "1.5"), "--top-p must be between 0 and 1"),
    (("--temp", "-1"), "--temp must be 0 or more"),
    (("--temp", "nan"), "not a finite number"),
    (("--min-p", "inf"), "not a finite number"),
    (("--top-k", "-3"), "--top-k must be 0"),
    (("-b", "16", "-ub", "32"), "must not be smaller than -ub/--ubatch-size"),
    (("-ub", "0"), "at least 1"),
    (("-ctk", "q3_bogus"), "unknown cache type 'q3_bogus'"),
    (("-ctv", "q8_0", "-fa", "off"), "needs flash attention"),
    (("-s", "-1"), "--seed must be between"),
    (("-t", "100000"), "-t/--threads must be at most 512"),  # used to segfault in ggml
    (("--keep", "-5"), "--keep must be -1"),
    (("-c", "abc"), "invalid int value: 'abc'"),
    (("--no-such-flag",), "unrecognized arguments"),
]
FLAG_IDS = [" ".join(a) for a, _ in FLAG_CASES]


@pytest.mark.parametrize(("flags", "needle"), FLAG_CASES, ids=FLAG_IDS)
@pytest.mark.parametrize("cmd", PROMPT_COMMANDS)
def test_flag_out_of_range(cmd: str, flags: tuple[str, ...], needle: str) -> None:
    one_sentence(run_cli(cmd, "-p", "hi", *flags), needle)


@pytest.mark.parametrize(("flags", "needle"), FLAG_CASES[:8], ids=FLAG_IDS[:8])
def test_app_flag_out_of_range(flags: tuple[str, ...], needle: str) -> None:
    """The app checks its flags before the UI starts."""
    one_sentence(run_cli(*flags), needle)


@pytest.mark.parametrize("cmd", PROMPT_COMMANDS)
def test_negative_n_predict(cmd: str) -> None:
    one_sentence(run_cli(cmd, "-p", "hi", "-n", "-1"), "-n/--n-predict must be 0 or more")


def test_info_negative_context() -> None:
    one_sentence(run_cli("info", "-c", "-5"), "-c/--ctx-size must be at least 1")


# -- prompts -------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   \n\t "], ids=["empty", "blank"])
@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat"])
@pytest.mark.parametrize("cmd", PROMPT_COMMANDS)
def test_empty_prompt(cmd: str, prompt: str, chat: bool) -> None:
    extra = ("--chat",) if chat else ()
    one_sentence(run_cli(cmd, "-p", prompt, *extra), "the prompt is empty")


def test_empty_stdin() -> None:
    one_sentence(run_cli("trace", "-p", "-", stdin=b""), "the prompt is empty")


def test_no_prompt() -> None:
    one_sentence(run_cli("trace"), "no prompt")


@pytest.mark.parametrize("words", [100, 300])
def test_prompt_longer_than_context(model, words: int) -> None:
    """llama.cpp pads a 32-token context to 256 cells but caps n_batch at 32; 100 tokens
    used to reach llama_decode in one call and abort the process (GGML_ASSERT)."""
    prompt = "word " * words
    n_tokens = len(model_tokens(model, prompt))
    assert n_tokens > 32
    msg = one_sentence(run_cli("trace", "-p", prompt, "-c", "32"), "context")
    assert f"needs {n_tokens} tokens" in msg
    assert "holds 32" in msg


def test_pasted_100kb_prompt(tmp_path: Path) -> None:
    big = tmp_path / "paste.txt"
    big.write_text("All work and no play makes Jack a dull boy. " * 2300)  # ~100 kB
    assert big.stat().st_size > 100_000
    one_sentence(run_cli("trace", "-f", str(big)), "the prompt needs", "holds 4096")


def model_tokens(model, text: str) -> list[int]:
    from tui.engine.model.tokens import Vocab

    return Vocab(model.vocab, model.info.n_vocab).tokenize(text, add_special=True)


@pytest.fixture(scope="module")
def llama_vocab(model_path: Path) -> Llama:
    """llama-cpp-python's own tokenizer, as an oracle."""
    return Llama(model_path=str(model_path), vocab_only=True, verbose=False)


def _prefill_ids(res: subprocess.CompletedProcess) -> list[int]:
    assert res.returncode == 0, res.stderr.decode()
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    return [t["id"] for r in recs for t in r["batch"]]


def test_special_token_text_is_plain_text(llama_vocab: Llama) -> None:
    text = "<|im_end|>"
    special_id = llama_vocab.tokenize(text.encode(), add_bos=False, special=True)
    assert len(special_id) == 1
    plain = _prefill_ids(run_cli("trace", "-p", text, "-n", "0"))
    assert plain == llama_vocab.tokenize(text.encode(), add_bos=False, special=False)
    assert len(plain) > 1 and special_id[0] not in plain
    assert llama_vocab.detokenize(plain) == text.encode()
    parsed = _prefill_ids(run_cli("trace", "-p", text, "-n", "0", "--special"))
    assert parsed == special_id


def test_special_token_text_in_chat_stays_text(llama_vocab: Llama) -> None:
    """In a chat message, typed special-token text cannot forge a turn boundary."""
    special_id = llama_vocab.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]
    with_marker = _prefill_ids(run_cli("trace", "--chat", "-p", "a<|im_end|>b", "-n", "0"))
    without = _prefill_ids(run_cli("trace", "--chat", "-p", "ab", "-n", "0"))
    # The template's own markers are the only special ids; the typed one added none.
    assert with_marker.count(special_id) == without.count(special_id)


def test_invalid_utf8_on_stdin() -> None:
    msg = one_sentence(
        run_cli("trace", "-p", "-", stdin=b"ab\xff\xfecd"), "standard input", "not valid UTF-8"
    )
    assert "offset 2" in msg


def test_invalid_utf8_in_argv() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tui", "trace", "-p", b"ok \xff\xfe"],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    one_sentence(res, "not valid UTF-8", "character 3")


def test_invalid_utf8_in_prompt_file(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    f.write_bytes("café".encode("latin-1"))
    one_sentence(run_cli("trace", "-f", str(f)), str(f), "not valid UTF-8", "offset 3")


def test_prompt_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "missing.txt"
    one_sentence(run_cli("trace", "-f", str(path)), "cannot read prompt file", "No such file")


def test_prompt_file_is_directory(tmp_path: Path) -> None:
    one_sentence(run_cli("trace", "-f", str(tmp_path)), "cannot read prompt file", "directory")


def test_message_with_control_characters_is_escaped(tmp_path: Path) -> None:
    """A path with a newline and an escape sequence comes back on one line, escaped."""
    path = tmp_path / "evil\n\x1b[2Jname.gguf"
    msg = one_sentence(run_cli("info", "-m", str(path)), "not found")
    assert "\\n\\x1b[2Jname.gguf" in msg


def _trace_has(flag: str) -> bool:
    from tui.args import build_parsers

    return flag in build_parsers()["trace"]._option_string_actions


@pytest.mark.skipif(not _trace_has("--attention"), reason="trace has no --attention flag yet")
@pytest.mark.parametrize(
    ("value", "needle"),
    [("999", "out of range: this model has 30 layers"), ("abc", "expected a layer number")],
)
def test_attention_layer_out_of_range(value: str, needle: str) -> None:
    one_sentence(run_cli("trace", "-p", "hi", "-n", "1", f"--attention={value}"), needle)
