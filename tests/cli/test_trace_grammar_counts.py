"""``trace`` under a grammar: each stage's ``survivors`` is llama.cpp's own count (top-k keeps
its k even where the grammar left fewer) and ``allowed`` the survivors the grammar allows, the
count the panes show. The trace used to give only the first, so a record read "top-k 40" where
six tokens could be picked."""

from __future__ import annotations

import json

from llama_cpp import Llama

from tests.support.cli import run_cli
from tui.engine.model.model import default_model_path

GRAMMAR = 'root ::= " yes" | " no"'
PROMPT = "Is the sea salty? Answer:"


def grammar_first_step() -> set[int]:
    """The oracle: the tokens a first step of GRAMMAR allows, read off llama-cpp-python's own
    vocabulary: every piece that is a non-empty prefix of one of its two words."""
    llm = Llama(str(default_model_path()), vocab_only=True, verbose=False)
    words = (b" yes", b" no")
    return {
        t
        for t in range(llm.n_vocab())
        if (p := llm.detokenize([t], special=False)) and any(w.startswith(p) for w in words)
    }


def stages(*flags: str) -> list[dict]:
    res = run_cli("trace", "-p", PROMPT, "-n", "1", "--grammar", GRAMMAR, *flags)
    assert res.returncode == 0, res.stderr
    rec = next(r for r in map(json.loads, res.stdout.decode().splitlines()) if "stages" in r)
    return rec["stages"]


def test_with_no_cuts_every_stage_allows_what_the_grammar_allows() -> None:
    allowed = grammar_first_step()
    st = stages("--top-k", "0", "--top-p", "1", "--min-p", "0")
    assert st[0]["sampler"] == "grammar" and st[0]["survivors"] == len(allowed)
    for e in st[1:]:
        assert e["allowed"] == len(allowed)  # nothing cut among the tokens the grammar allows
        assert e["survivors"] == 49152  # llama.cpp's count: the whole vocabulary, -inf or not


def test_a_stage_never_allows_more_than_the_stage_before() -> None:
    st = stages()
    assert [e["name"] for e in st][:2] == ["grammar", "top-k"]
    assert st[1]["survivors"] == 40 and st[1]["allowed"] <= st[0]["survivors"]
    for before, after in zip(st, st[1:], strict=False):
        assert after["allowed"] <= before.get("allowed", before["survivors"])
        assert after["allowed"] <= after["survivors"]
