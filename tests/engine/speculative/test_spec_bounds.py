"""Speculative decoding's counts bounded like the sampler's (issue 37, item 10), and a draft
model that lacks an id of the context said in one sentence, not "llama_decode failed" at every
round (item 7)."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tui.engine import SamplerSettings
from tui.engine.speculative.spec_draft import DraftSimple


def _refused(*flags: str) -> str:
    proc = run_cli("trace", "-p", "hi", "-n", "1", *flags)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.startswith("tokenstep: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "flag,value,lo",
    [
        ("--spec-draft-n-max", "9223372036854775808", 0),
        ("--spec-draft-n-max", "2147483648", 0),
        ("--spec-draft-n-min", "2147483648", 0),
        ("--spec-draft-n-min", "-1", 0),
        ("--spec-ngram-simple-min-hits", "-1", 1),
        ("--spec-ngram-simple-min-hits", "0", 1),
    ],
)
def test_speculative_counts_are_bounded_as_top_k_is(flag, value, lo):
    err = _refused("--spec-type", "ngram-simple", flag, value)
    assert f"{flag} must be between {lo} and 2147483647 (llama.cpp's 32-bit int), not {value}." in err


def test_an_empty_spec_type_is_refused_like_any_unknown_one():
    err = _refused("--spec-type", "")
    assert "--spec-type must be none, ngram-simple or draft-simple, not ''." in err
    err = _refused("--spec-type", "NGRAM-SIMPLE")
    assert "not 'NGRAM-SIMPLE'" in err


def test_the_bounds_themselves_run(model_path):
    proc = run_cli(
        "trace", "-p", "hi", "-n", "1", "-c", "512", "--spec-type", "ngram-simple",
        "--spec-draft-n-max", "2147483647", "--spec-ngram-simple-min-hits", "1",
    )
    assert proc.returncode == 0, proc.stderr.decode()


def test_a_draft_model_is_not_fed_an_id_outside_its_vocabulary(make_engine, draft_model_path):
    """llama.cpp's check lets a draft vocabulary be up to 128 tokens smaller than the
    target's; an id of the context past it would make the draft's llama_decode fail (-1).
    Here the id past the draft's vocabulary is handed in directly: no decode, no draft, and
    the reason in one sentence."""
    target = make_engine(SamplerSettings(temp=0.0))
    d = DraftSimple(target, draft_model_path)
    try:
        n = d.engine.info.n_vocab
        hello = target.vocab.tokenize("Hello", add_special=True)
        assert d.draft(hello, hello[-1], 3) and d.cannot is None  # it drafts normally
        decodes = len(d.engine.records)
        assert d.draft([*hello, n + 5], hello[-1], 3) == []
        assert d.cannot == (
            f"the context holds token {n + 5:,}, which the draft model's {n:,}-token "
            "vocabulary lacks, so it cannot be fed to it"
        )
        assert len(d.engine.records) == decodes and d.draft_decodes == 0  # nothing decoded
        assert d.draft(hello, hello[-1], 3) and d.cannot is None  # and it drafts again
    finally:
        d.close()
