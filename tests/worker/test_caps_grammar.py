"""What a grammar may cost: the repetitions a JSON schema asks for (checked against what
llama.cpp's grammar parser repeats, before converting), a grammar's size and rules, and the CPU time of applying it to
the vocabulary once, as every step does. Each past its bound is one sentence, in bounded time
and memory; and a left-recursive grammar is called that, not "needs a root rule"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.measured import refused, run_measured, sampled
from tests.support.resume_files import good_header, write
from tui.engine import TokenstepError
from tui.worker.resume import load_header


def alternatives(n: int) -> str:
    return "root ::= " + " | ".join(f'"w{i}x"' for i in range(n)) + "\n"


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "string", "minLength": 1e8}, "minLength 100,000,000"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 1e8}, "minItems 100,000,000"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "maxLength": 10**9}}},
            "maxLength",
        ),
        ({"type": "string", "pattern": "^a{100000000}$"}, "pattern repeats 100000000 times"),
    ],
    ids=["minLength", "minItems", "nested-maxLength", "pattern"],
)
def test_a_schema_asking_for_too_many_repetitions_is_one_sentence(schema, words):
    """As reported: minLength 10^8 took 3 GB and 40 s, minItems 10^8 8.3 GB (killed)."""
    m = run_measured("trace", "-p", "x", "-n", "1", "-j", json.dumps(schema))
    refused(m, "-j/--json-schema", words, "repeats a rule at most 2,000 times")


def test_a_schema_at_the_bound_still_runs():
    """llama.cpp's converter writes minItems 2001 as an item then 2,000 more: the most its
    grammar parser repeats (MAX_REPETITION_THRESHOLD)."""
    m = run_measured(
        "trace", "-p", "Say", "-n", "2", "--temp", "0", "-j",
        json.dumps({"type": "array", "items": {"type": "string"}, "minItems": 2001}),
    )  # fmt: skip
    assert m.returncode == 0, m.stderr[-400:]
    assert len(sampled(m)) >= 1


def test_a_grammar_file_of_a_megabyte_is_one_sentence(tmp_path: Path):
    """1.3 MB, 120,000 alternatives: 18 s to parse and 63 s a token."""
    path = tmp_path / "big.gbnf"
    path.write_text(alternatives(120_000))
    refused(
        run_measured("trace", "-p", "x", "-n", "1", "--grammar-file", str(path), timeout=60),
        "--grammar-file is 1,448,897 bytes",
        "at most 131,072 bytes",
    )


def test_a_grammar_of_five_thousand_rules_is_one_sentence(tmp_path: Path):
    rules = "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1}\n' for i in range(5000))
    rules += 'r5000 ::= "b"\n'
    path = tmp_path / "rules.gbnf"
    path.write_text(rules)
    refused(
        run_measured("trace", "-p", "x", "-n", "1", "--grammar-file", str(path), timeout=60),
        "--grammar-file has 5,002 rules",
        "at most 4,096",
    )


def test_a_grammar_too_slow_to_apply_is_one_sentence(tmp_path: Path):
    """11,000 alternatives are 121 kB, under the size bound, but one application to the
    bundled vocabulary took 4.8 to 5.0 s of CPU here (8,000: 0.7 to 3.5 s on this loaded
    machine; a JSON grammar: under 0.01 s; the bound is 0.5 s): refused after that first one, before any step,
    instead of running every step at that cost."""
    path = tmp_path / "slow.gbnf"
    path.write_text(alternatives(11_000))
    m = run_measured("trace", "-p", "x", "-n", "3", "--grammar-file", str(path), timeout=90)
    refused(m, "of CPU to check the vocabulary once", "at most 0.5 s", seconds=60, mib=600)


def test_a_resume_file_grammar_has_the_same_bounds(tmp_path: Path):
    h = good_header()
    h["settings"]["grammar"] = alternatives(120_000)
    with pytest.raises(TokenstepError, match=r"settings\.grammar is 1,448,897 bytes"):
        load_header(write(tmp_path / "s.jsonl", h))


def test_a_left_recursive_grammar_is_called_left_recursive():
    """llama.cpp's parser detects left recursion and logs it; the sentence said the grammar
    "needs a root rule", which it has."""
    m = run_measured("trace", "-p", "x", "-n", "1", "--grammar", 'root ::= root "a" | "a"')
    msg = refused(m, "left-recursive", "left recursion detected", seconds=60)
    assert "root rule" not in msg
