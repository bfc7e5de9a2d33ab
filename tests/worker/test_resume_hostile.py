"""Hostile resume files: each is checked completely, once, before the screen opens, and
refused in one sentence that names the field (never a traceback, a frozen "loading…"
header, or a Rich traceback and exit 0 from the logits pane).

The files are written here, starting from a header with every field a saved session has;
the command-line cases run ``python -m tui --resume FILE`` as a user would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import one_sentence, run_cli
from tests.support.resume_files import good_header, write
from tui.args import parse
from tui.engine import TokenstepError
from tui.worker.resume import apply_to_args, load_header


def with_field(dotted: str, value: Any) -> dict[str, Any]:
    h = good_header()
    *outer, last = dotted.split(".")
    obj = h
    for part in outer:
        obj = obj[part]
    obj[last] = value
    return h


def test_the_good_header_loads(tmp_path: Path) -> None:
    args = parse(["--resume", "x"])[1]
    apply_to_args(args, load_header(write(tmp_path / "s.jsonl", good_header())))
    assert (args.ctx_size, args.top_k, args.temp) == (512, 40, 0.8)


# (field, value, words the sentence must hold). Each of these once got past the check.
CASES = [
    ("settings.temp", float("nan"), "settings.temp must be a finite number, not NaN"),  # 3
    ("settings.temp", float("inf"), "settings.temp must be a finite number, not Infinity"),  # 8
    ("settings.min_p", float("-inf"), "settings.min_p must be a finite number"),
    ("settings.temp", "hot", "settings.temp must be a number, not 'hot'"),  # 4
    ("settings.top_k", 2.5, "settings.top_k must be a whole number, not 2.5"),  # 7
    ("settings.top_k", True, "settings.top_k must be a whole number, not true"),
    ("settings.greedy", "no", "settings.greedy must be true or false, not 'no'"),  # 8
    ("settings.seed", -1, "settings.seed must be between"),
    ("settings", [], "settings must be an object, not a list"),
    ("config.n_ctx", "1024", "config.n_ctx must be a whole number, not '1024'"),  # 4
    ("config", {**good_header()["config"], "n_batch": 1, "n_ubatch": 1}, "config.n_batch is 1"),
    ("config.cache_type_k", "q3_bogus", "config.cache_type_k: unknown cache type"),
    ("config.context_full", None, "config.context_full must be a string, not null"),
    ("config", "x", "config must be an object"),
    ("model", [], "model must be an object, not a list"),  # 5
    ("model", "x", "model must be an object, not 'x'"),  # 5
    ("model.name", 7, "model.name must be a string"),
    ("tokenstep_session", True, "is not a tokenstep session file"),  # 8
    ("tokenstep_session", 0, "is not a tokenstep session file"),
    ("tokenstep_session", 3, "saved by a newer tokenstep (session format 3); this one reads"),
    ("conversation", [["user", "hi"]], "conversation[0] must have a role"),
    ("conversation", [{"role": "user", "content": 5}], "conversation[0].content"),
    ("mode", 3, "mode must be raw or chat, not 3"),
    ("prefix_cache", "yes", "prefix_cache must be true or false"),
    ("attention.layer", 1.5, "attention.layer must be a whole number"),
    ("context_tokens", [1, -2], "context_tokens must be a list of token ids"),
    ("context_tokens", list(range(600)), "600 context tokens but its config.n_ctx is 512"),
]
IDS = [f"{f}={v!r}"[:40] for f, v, _ in CASES]


@pytest.mark.parametrize(("field", "value", "words"), CASES, ids=IDS)
def test_a_bad_field_is_one_sentence_naming_it(
    tmp_path: Path, field: str, value: Any, words: str
) -> None:
    path = write(tmp_path / "s.jsonl", with_field(field, value))
    with pytest.raises(TokenstepError) as err:
        load_header(path)
    msg = str(err.value)
    assert words in msg, msg
    assert "\n" not in msg and msg.endswith(".")


def test_a_file_nested_a_hundred_thousand_deep(tmp_path: Path) -> None:
    """Item 6: ``[`` x 100,000 then ``]`` x 100,000 used to end in a RecursionError traceback
    from the JSON decoder."""
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    one_sentence(run_cli("--resume", str(path)), "nests too deeply")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [CASES[0], CASES[4], CASES[9], CASES[14]],
    ids=["temp-NaN", "top_k-2.5", "n_ctx-string", "model-list"],
)
def test_the_app_refuses_before_the_screen_opens(
    tmp_path: Path, field: str, value: Any, words: str
) -> None:
    """As reported: the screen opened (NaN: then a Rich traceback and exit 0; top_k 2.5: the
    header stuck at "loading…") or a Python traceback. Now one sentence and exit 1."""
    path = write(tmp_path / "s.jsonl", with_field(field, value))
    msg = one_sentence(run_cli("--resume", str(path)), words)
    assert msg.startswith(f"the session file {path} cannot be resumed")


def test_a_million_token_context_is_refused_before_it_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 9: config.n_ctx 1048576 and 10^6 context tokens climbed to 24 GB of RSS with no
    screen. The memory budget refuses the context before llama.cpp allocates it (the
    available memory is pinned so the figure does not depend on this machine)."""
    h = with_field("config.n_ctx", 1 << 20)
    h["context_tokens"] = [1] * 1_000_000
    path = write(tmp_path / "big.jsonl", h)
    monkeypatch.setenv("TOKENSTEP_MEMORY_AVAILABLE", str(8 << 30))
    msg = one_sentence(run_cli("--resume", str(path)), "8,192 MiB are available")
    assert msg.startswith(f"resuming {path}: -c 1,048,576 would need about")
