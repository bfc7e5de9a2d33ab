"""Damaged resume files, round three: the paths not taken, text that is not UTF-8, and a
conversation too long to render. Each was a traceback (or, with DRY on, a header stuck at
"loading…", or 35 s before the screen opened); each is now one sentence naming the field,
from ``load_header``, before the model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import one_sentence, run_cli
from tests.support.resume_files import good_header, write
from tui.engine import TokenstepError
from tui.worker.resume import load_header


def raw_header(**changes: Any) -> dict[str, Any]:
    """A raw session on the bundled model (no saved name to mismatch): its reply starts
    after the three context tokens, so saved paths with ``reply_start`` 3 are read."""
    h = good_header()
    h["mode"], h["model"], h["conversation"] = "raw", {}, []
    h["paths"] = {"reply_start": 3, "branches": []}
    h.update(changes)
    return h


PICK = {  # one pick of a branch as format 2 saves it
    "p": 0.5, "p_final": 0.75, "entropy": 1.25, "forced": False, "seed": 5,
    "cuts": [["top-k", 40], ["dist", 1]], "partial": False,
}


def branch(**changes: Any) -> dict[str, Any]:
    return {"id": 1, "how": "rewind", "tokens": [5, 6], "values": [None, None], **changes}


PATHS = [
    (branch(tokens="abc"), "paths.branches[0].tokens must be a list of token ids"),
    (branch(values=[["x"]]), "paths.branches[0].values[0] must be null, a pick or [p, p', "),
    (branch(values=[[0.5, None, float("nan")]]), "paths.branches[0].values[0] must be a finite"),
    (branch(values=[PICK | {"seed": "5"}]), "paths.branches[0].values[0].seed must be a whole"),
    (branch(values=[PICK | {"cuts": [["top-k", -1]]}]), "values[0].cuts must be a list of [stage"),
    (branch(values=[PICK | {"forced": 1}]), "paths.branches[0].values[0].forced must be true or"),
    (branch(how=7), "paths.branches[0].how must be one of rewind"),
    ("x", "paths.branches[0] must be an object, not 'x'"),
]


@pytest.mark.parametrize(
    ("b", "words"), PATHS, ids=["tokens", "values", "nan", "seed", "cuts", "forced", "how", "str"]
)
def test_a_damaged_branch_is_one_sentence_naming_it(tmp_path: Path, b: Any, words: str):
    path = write(tmp_path / "s.jsonl", raw_header(paths={"reply_start": 3, "branches": [b]}))
    with pytest.raises(TokenstepError) as err:
        load_header(path)
    assert words in str(err.value), err.value


@pytest.mark.parametrize(
    ("paths", "words"),
    [
        ([1, 2], "paths must be an object, not a list"),
        ({"reply_start": 3, "branches": {"a": 1}}, "paths.branches must be a list"),
        ({"reply_start": "3", "branches": []}, "paths.reply_start must be a whole number"),
    ],
    ids=["list", "branches-object", "reply_start-str"],
)
def test_damaged_paths_are_one_sentence_before_the_screen_opens(tmp_path, paths, words):
    """As reported, ``paths: [1, 2]`` and ``tokens: "abc"`` were tracebacks from the worker's
    restore, after the model had loaded."""
    path = write(tmp_path / "s.jsonl", raw_header(paths=paths))
    msg = one_sentence(run_cli("--resume", str(path), timeout=60), words)
    assert msg.startswith(f"the session file {path} cannot be resumed")


def test_a_branch_of_strings_is_one_sentence_in_the_app(tmp_path):
    h = raw_header(paths={"reply_start": 3, "branches": [branch(tokens="abc")]})
    path = write(tmp_path / "s.jsonl", h)
    one_sentence(run_cli("--resume", str(path), timeout=60), "paths.branches[0].tokens")


SURROGATES = [
    ("conversation", [{"role": "user", "content": "hi \ud800"}], "conversation[0].content"),
    ("settings", {"dry_sequence_breakers": ["\udcff"]}, "settings.dry_sequence_breakers[0]"),
    ("settings", {"grammar": 'root ::= "\udcfe"'}, "settings.grammar"),
]


@pytest.mark.parametrize(("key", "value", "field"), SURROGATES, ids=["content", "dry", "grammar"])
def test_a_lone_surrogate_is_one_sentence_naming_the_field(tmp_path, key, value, field):
    """JSON's ``\\ud800`` is a lone surrogate: a UnicodeEncodeError traceback where the text
    met llama.cpp's tokenizer; with DRY on (its breakers are encoded on the worker thread)
    the app stayed at "loading…" forever. Refused before the screen opens."""
    h = raw_header(mode="chat")
    if key == "settings":
        h["settings"] = {**h["settings"], "dry_multiplier": 1.0, **value}
    else:
        h[key] = value
    path = write(tmp_path / "s.jsonl", h)
    msg = one_sentence(run_cli("--resume", str(path), timeout=60), field, "not UTF-8 text")
    assert "lone surrogate" in msg


def test_a_hundred_thousand_messages_are_one_sentence(tmp_path):
    """100,000 messages took 35 s before the screen opened (the template renders all of them
    and each message is tokenized; slicing the rendered text after each one was n^2 too)."""
    conv = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(100_000)]
    path = write(tmp_path / "s.jsonl", raw_header(mode="chat", conversation=conv))
    one_sentence(
        run_cli("--resume", str(path), timeout=60),
        "conversation holds 100,000 messages",
        "at most 10,000",
    )


def test_a_saved_window_past_any_context_is_one_sentence(tmp_path):
    """``settings.repeat_last_n`` 300,000,000 in a resume file took 1.4 GB (a ring buffer of
    that many tokens); the flags' bound applies, naming the field."""
    h = raw_header()
    h["settings"] = {**h["settings"], "repeat_last_n": 300_000_000, "repeat_penalty": 1.1}
    path = write(tmp_path / "s.jsonl", h)
    one_sentence(
        run_cli("--resume", str(path), timeout=60),
        "settings.repeat_last_n 300000000 is longer than any context",
    )
