"""Values without a bound: penalty windows, counts llama.cpp takes as int32, repeated flags.

Each case runs ``python -m tui trace`` as a user would, under an address-space limit so that a
regression fails fast instead of taking the machine's memory (``--dry-penalty-last-n
99999999999`` once took 9.5 GB and 27 s), and checks one sentence, exit 1, no traceback, and
the time and peak RSS the process took: its own ``VmHWM``, written as it exits (Linux starts a
child's rusage ``ru_maxrss`` from the parent's high-water mark at fork, so in a long pytest run
it would count pytest's own 770 MB).
"""

from __future__ import annotations

import time

import pytest

from tests.support.measured import Measured, refused, run_measured, sampled
from tui.args import parse
from tui.engine import SamplerSettings, TokenstepError


# -- item 4: penalty windows ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (
            ["--repeat-last-n", "99999999999999999999", "--repeat-penalty", "1.1"],
            ["--repeat-last-n 99999999999999999999", "32-bit", "1661992959"],
        ),
        (
            ["--dry-penalty-last-n", "99999999999", "--dry-multiplier", "1"],
            ["--dry-penalty-last-n 99999999999", "32-bit", "1215752191"],
        ),
        (
            ["--repeat-last-n", "300000000", "--repeat-penalty", "1.1"],
            ["--repeat-last-n 300000000", "at most 1048576 tokens", "-1"],
        ),
        (["--top-k", "4294967336"], ["--top-k 4294967336", "32-bit", "it would get 40"]),
    ],
    ids=["repeat-20-digits", "dry-1e11", "repeat-3e8", "top-k-wraps-to-40"],
)
def test_a_window_or_count_past_its_bound_is_one_sentence(flags: list[str], words: list[str]):
    """As reported: 9.5 GB and 27 s (DRY), 1.4 GB (penalties), and a trace that echoed
    99999999999999999999 while llama.cpp was given 1,661,992,959."""
    refused(run_measured("trace", "-p", "The cat", "-n", "1", *flags), *words)


def test_a_window_longer_than_the_context_is_the_context():
    """Bounded by the context, as llama.cpp's -1 means: a window of 1048576 (the largest
    tokenstep takes) on -c 64 runs as a window of 64 would, in the memory a window of 64
    takes (the ring buffer is allocated at the window's size)."""

    def run(n: str) -> Measured:
        m = run_measured(
            "trace", "-p", "The cat sat on the mat. The cat", "-n", "4", "-c", "64",
            "--repeat-last-n", n, "--repeat-penalty", "1.5",
            "--dry-penalty-last-n", n, "--dry-multiplier", "1",
        )  # fmt: skip
        assert m.returncode == 0, m.stderr[-400:]
        return m

    big, small = run("1048576"), run("64")
    assert sampled(big) == sampled(small) and len(sampled(big)) >= 1
    assert big.peak_mib < small.peak_mib + 64, (big.peak_mib, small.peak_mib)


def test_a_resume_file_and_the_chain_dialog_share_the_bound(tmp_path):
    """The same validator reads a session file (naming ``settings.repeat_last_n``) and the
    app's ``:`` line (``repeat-last-n 300000000`` goes through SamplerSettings.validate)."""
    s = SamplerSettings(repeat_last_n=300_000_000)
    with pytest.raises(TokenstepError, match=r"settings\.repeat_last_n 300000000 is longer"):
        s.validate(lambda k: f"settings.{k}")
    s = SamplerSettings(dry_penalty_last_n=99999999999)
    with pytest.raises(TokenstepError, match="--dry-penalty-last-n 99999999999 does not fit"):
        s.validate()
    s = SamplerSettings(dry_sequence_breakers=["a"] * 65)
    with pytest.raises(TokenstepError, match=r"settings\.dry_sequence_breakers: 65 breakers"):
        s.validate(lambda k: f"settings.{k}")
    s = SamplerSettings(logit_bias=[(1, 1.0)] * 300_000)
    with pytest.raises(TokenstepError, match=r"settings\.logit_bias: 300000 biases, at most"):
        s.validate(lambda k: f"settings.{k}")


# -- item 6: repeated flags -------------------------------------------------------------------
def test_many_logit_bias_flags_parse_in_linear_time():
    """49,151 ``-l ID-inf`` took 58 s in argparse (20,000: 10 s): it looks for each option's
    successor with a scan of every option. Now the repeats are taken out in one pass; parsing
    49,151 takes about 0.2 s (the bound leaves a loaded machine room)."""
    argv = ["trace", "-p", "x"]
    for i in range(1, 49_152):
        argv += ["-l", f"{i}-inf"]
    t0 = time.monotonic()
    _cmd, args = parse(argv)
    assert time.monotonic() - t0 < 5
    assert args.logit_bias == [f"{i}-inf" for i in range(1, 49_152)]


def test_the_gathered_flags_keep_argparse_meaning():
    p_argv = ["-l", "5+1", "--logit-bias=6-inf", "--dry-sequence-breaker", "-", "-p", "x"]
    _cmd, args = parse(["trace", *p_argv, "--", "ignored"][:-2])
    assert args.logit_bias == ["5+1", "6-inf"] and args.dry_sequence_breaker == ["-"]
    from tui.args import build_parsers
    from tui.sampler_flags import gather_repeats

    rest, got = gather_repeats(build_parsers()["trace"], ["-l", "--temp", "1"])
    assert rest == ["-l", "--temp", "1"] and got == {}  # argparse refuses it as before
    with pytest.raises(TokenstepError, match="expected one argument"):
        parse(["trace", "-p", "x", "-l", "--temp", "1"])


def test_every_token_banned_but_one_runs():
    """49,151 ``-l ID-inf`` (every token of the bundled vocabulary but id 0): the trace runs,
    and the one token left is the one sampled."""
    flags: list[str] = []
    for i in range(1, 49_152):
        flags += ["-l", f"{i}-inf"]
    m = run_measured("trace", "-p", "The cat", "-n", "1", "--temp", "0", *flags, timeout=90)
    assert m.returncode == 0, m.stderr[-400:]
    assert sampled(m) == [0]


def test_two_thousand_dry_breakers_are_one_sentence():
    """2,000 ``--dry-sequence-breaker`` took over 60 s: llama.cpp's DRY init scans the whole
    vocabulary for each breaker (20 ms each here, 400 took 10 s). More than 64 is refused
    before the model loads."""
    flags: list[str] = []
    for i in range(2000):
        flags += ["--dry-sequence-breaker", f"b{i}"]
    refused(
        run_measured("trace", "-p", "x", "-n", "1", "--dry-multiplier", "1", *flags),
        "--dry-sequence-breaker",
        "2000",
        "at most 64",
    )


# -- item 10: text that is not UTF-8 ------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--dry-multiplier", "1", "--dry-sequence-breaker", "\udcff\udcfe"], ["--dry-sequence"]),
        (["--grammar", 'root ::= "\udcff"'], ["--grammar is not UTF-8", "0xff"]),
        (["-j", '"\udcff"'], ["-j/--json-schema is not UTF-8", "0xff"]),
    ],
    ids=["breaker", "grammar", "json-schema"],
)
def test_bytes_that_are_not_utf8_are_one_sentence(flags: list[str], words: list[str]):
    """Bytes 0xff 0xfe in argv reach Python as lone surrogates: a UnicodeEncodeError traceback
    where the text was handed to llama.cpp."""
    args = [a.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape") for a in flags]
    refused(run_measured("trace", "-p", "x", "-n", "1", *args), "not UTF-8 text", *words)
