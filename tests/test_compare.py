"""``tokenstep compare``: the arithmetic, the command line's records and its refusals.

The figures against llama.cpp's own ``llama-perplexity`` are in test_compare_oracle.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.swa_model import write_swa_model
from tui.cli import main
from tui.compare import divergence

PROMPT = "The cat sat on the mat because it was warm, and the sun was shining on it all day."


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    capsys.readouterr()
    rc = main(["compare", "-t", "2", *argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def json_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[list[dict], dict]:
    rc, out, err = run(capsys, "-p", PROMPT, "--json", *argv)
    assert rc == 0, err
    assert "compare: " not in err  # stderr is no terminal here: no progress line
    lines = [json.loads(x) for x in out]
    return lines[:-1], lines[-1]


# --- the arithmetic -------------------------------------------------------------------------


def test_kl_of_identical_rows_is_zero_exactly_and_matches_the_definition_otherwise():
    rng = np.random.default_rng(1)
    la = rng.normal(0, 3, 4096).astype(np.float32)
    lb = (la + rng.normal(0, 0.5, 4096)).astype(np.float32)
    assert divergence.compare_rows(la, la.copy(), 7).kl == 0.0
    # the definition, term by term in extended precision, from the softmax itself
    xa, xb = la.astype(np.longdouble), lb.astype(np.longdouble)
    pa, pb = np.exp(xa - xa.max()), np.exp(xb - xb.max())
    pa, pb = pa / pa.sum(), pb / pb.sum()
    want = float(np.sum(pa * np.log(pa / pb)))
    d = divergence.compare_rows(la, lb, 7)
    assert d.kl == pytest.approx(want, rel=1e-9)
    assert d.rank_in_b == int(np.sum(lb > lb[7]))
    assert d.max_abs_dlogit == pytest.approx(float(np.max(np.abs(la - lb))), rel=1e-6)
    assert list(d.top_a[:3]) == list(np.argsort(-la, kind="stable")[:3])


def test_the_top_k_bound_never_exceeds_the_full_kl():
    rng = np.random.default_rng(2)
    for _ in range(20):
        la = rng.normal(0, 4, 2048)
        lb = la + rng.normal(0, 1.0, 2048)
        lpa, lpb = divergence.log_softmax(la), divergence.log_softmax(lb)
        top = divergence.top_k(lb, 10)
        bound = divergence.kl_bound(lpa, {int(t): float(lpb[t]) for t in top})
        assert 0.0 <= bound <= divergence.kl(lpa, lpb) + 1e-12


def test_the_statistics_are_llama_perplexitys():
    kls = [0.5, 0.1, 0.3, 0.2, 0.4]
    st = divergence.stats([10, 11, 12, 13, 14], kls, [True, False, True, False, True])
    assert (st.n, st.kl_max, st.kl_median) == (5, 0.5, 0.3)
    assert st.kl_mean == pytest.approx(0.3)
    # 99th percentile, linear between the two nearest: 0.4 + 0.96 * (0.5 - 0.4)
    assert st.kl_p99 == pytest.approx(0.496)
    assert (st.same_top, st.first_flip, st.n_flips) == (0.6, 11, 2)
    assert st.by_kl == (10, 14, 12, 13, 11)


# --- the command line -----------------------------------------------------------------------


def test_json_lines_hold_every_position_then_the_summary(capsys):
    rows, s = json_run(capsys, "--vs", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on")
    assert s["n"] == len(rows) > 10
    assert [r["position"] for r in rows] == list(range(len(rows)))  # from position 0 on
    for r in rows:
        assert r["kl"] >= 0.0
        assert r["same_top"] == (r["top1_a"] == r["top1_b"])
        assert r["top_a"][0]["id"] == r["top1_a"] and r["top_b"][0]["id"] == r["top1_b"]
        assert (r["rank_in_b"] == 0) == (r["token"] == r["top1_b"])
        assert r["dp"] == pytest.approx(r["p_b"] - r["p_a"])
        assert r["token_b"] is None and r["piece_b"] is None  # teacher-forced: no pick of B's
    assert s["kl_mean"] == pytest.approx(sum(r["kl"] for r in rows) / len(rows))
    assert s["kl_max"] == max(r["kl"] for r in rows)
    assert s["same_top"] == sum(r["same_top"] for r in rows) / len(rows)
    flips = [r["position"] for r in rows if not r["same_top"]]
    assert s["first_flip"] == (flips[0] if flips else None)
    by = {r["position"]: r["kl"] for r in rows}
    assert [by[p] for p in s["by_kl"]] == sorted(by.values(), reverse=True)
    # the KV cache each side allocates: ggml's row sizes, q8_0 is 34 bytes per 32 values
    assert s["b"]["kv_bytes"] * 64 == s["a"]["kv_bytes"] * 34
    assert s["kl_is_bound"] is False and s["mode"] == "teacher"


def test_without_a_terminal_the_table_starts_with_the_summary_line(capsys):
    rc, out, err = run(capsys, "-p", PROMPT, "--vs", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on")
    assert rc == 0, err
    assert out[0].startswith("q4_0 KV: 72% less KV memory, top-1 differs at ")
    assert " KL mean " in out[0]
    assert any(line.startswith("A: f16 KV") for line in out)


def test_a_sampler_only_change_shares_the_logits_and_says_so(capsys):
    rows, s = json_run(capsys, "--vs", "--temp", "0")
    assert s["shared_logits"] is True
    assert s["kl_max"] == 0.0 and s["same_top"] == 1.0
    assert s["b"]["differs"] == ["--temp 0.0"] and s["b"]["sampler"] == "greedy"
    rc, out, _ = run(capsys, "-p", PROMPT, "--vs", "--temp", "0")
    assert "both sides share A's logits" in out[0]


def test_a_greedy_continuation_is_fed_to_both_sides(capsys):
    rows, s = json_run(capsys, "-n", "6", "--vs", "-ub", "1")
    plain, _ = json_run(capsys, "--vs", "-ub", "1")
    assert len(rows) == len(plain) + 6  # the prompt's positions, then A's six picks
    for r in rows[len(plain) - 1 : -1]:  # each pick is A's own top-1
        assert r["token"] == r["top1_a"]


def test_free_running_sides_with_the_same_chain_never_part(capsys):
    rows, s = json_run(capsys, "--free", "-n", "8", "--vs")
    assert s["mode"] == "free" and s["parted_at"] is None
    assert all(r["token"] == r["token_b"] for r in rows)
    assert s["text_a"] == s["text_b"] != ""


def test_free_running_sides_part_where_their_picks_differ(capsys):
    rows, s = json_run(capsys, "--free", "-n", "24", "--temp", "1.5", "--vs", "-s", "7")
    parted = s["parted_at"]
    assert parted is not None, "seeds 42 and 7 at temp 1.5 gave 24 equal picks"
    for r in rows:
        if r["position"] < parted:  # the same tokens in both contexts: the same logits
            assert r["token"] == r["token_b"] and r["kl"] == 0.0
    at = next(r for r in rows if r["position"] == parted)
    assert at["token"] != at["token_b"] and at["kl"] == 0.0
    for r in rows:  # B's pick is named by its piece, in or out of B's top K
        assert isinstance(r["piece_b"], str)
        if r["token_b"] == r["token"]:
            assert r["piece_b"] == r["piece"]
        named = {c["id"]: c["piece"] for c in r["top_b"]}
        if r["token_b"] in named:
            assert r["piece_b"] == named[r["token_b"]]
    assert at["piece_b"] != at["piece"]
    assert s["text_a"] != s["text_b"]


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Gemma-2-shaped GGUF with a 259-token byte vocabulary (tests/swa_model.py)."""
    return write_swa_model(tmp_path_factory.mktemp("vocab") / "other.gguf")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-p", PROMPT], "compare needs --vs"),
        (["-p", PROMPT, "--vs", "--bogus", "3"], "after --vs: unrecognized arguments: --bogus"),
        (["-p", PROMPT, "--vs", "-p", "other"], "-p after --vs"),
        (["-p", PROMPT, "--vs", "-ub", "0"], "after --vs: -b/--batch-size and -ub"),
        (["-p", PROMPT, "--vs", "-ctv", "q4_0", "-fa", "off"], "after --vs: a quantized V"),
        (["-p", PROMPT, "--vs", "-m", "/nonexistent/b.gguf"], "B's model (after --vs): "),
        (["-p", PROMPT, "--vs", "-m", "OTHER"], "cannot be compared with A's: its vocabulary"),
        (["-p", PROMPT, "--chunks", "--vs"], "--chunks needs at least -c (512) tokens"),
        (["-p", "x" * 3000, "-c", "64", "--vs"], "raise -c or score it in chunks"),
    ],
)
def test_bad_input_is_one_sentence_and_a_nonzero_exit(capsys, other_vocab, argv, said):
    argv = [str(other_vocab) if a == "OTHER" else a for a in argv]
    rc, out, err = run(capsys, *argv)
    assert rc == 1 and out == []
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenstep: "), err
    assert said in lines[0]
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """The real llama-server on the bundled model, flash attention off as A's below."""
    from tests.llama_server import start_server

    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    srv.stop()


def test_a_remote_b_gives_a_kl_bound_from_its_top_k_and_says_so(capsys, server):
    local, ls = json_run(capsys, "-fa", "off", "--vs", "-ub", "1")
    rows, s = json_run(capsys, "-fa", "off", "--vs", "--server", server.url, "--n-probs", "50")
    assert s["kl_is_bound"] is True and s["b"]["remote"] is True and s["b"]["kv_bytes"] is None
    assert [r["position"] for r in rows] == [r["position"] for r in local]
    for r, lr in zip(rows, local, strict=True):
        assert r["p_a"] == lr["p_a"] and r["top_a"] == lr["top_a"]  # A is the same context
        assert r["kl"] >= 0.0
        ps = [c["p"] for c in r["top_b"]]
        assert ps == sorted(ps, reverse=True) and len(ps) == 10
        assert r["top1_b"] == r["top_b"][0]["id"]
        if r["rank_in_b"] is None:  # not among the 50 listed: at most the 50th p
            assert r["p_b"] == 0.0
    rc, out, _ = run(capsys, "-p", PROMPT, "-fa", "off", "--vs", "--server", server.url)
    assert rc == 0 and " KL bound mean " in out[0]
    assert any("the KL a lower bound" in line for line in out)


def test_a_remote_run_announces_how_many_positions_it_will_compare(server):
    from .test_compare_progress import counted

    totals, n = counted(["-t", "2", "-p", PROMPT, "-fa", "off", "--vs", "--server", server.url])
    assert totals == [n]  # the progress line's total


def test_a_remote_a_is_refused(capsys):
    rc, out, err = run(capsys, "-p", PROMPT, "--server", "http://127.0.0.1:1", "--vs")
    assert rc == 1 and "A must be local" in err and len(err.strip().splitlines()) == 1


def test_a_kld_base_file_gives_the_figures_of_a_live_a(capsys, tmp_path):
    base = tmp_path / "a.kld"
    b = ["--vs", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]
    live_rows, live = json_run(capsys, "--kld-base", str(base), *b)
    assert base.is_file()
    rc, out, err = run(capsys, "--json", "--kld-base", str(base), *b)  # no text: the file's
    assert rc == 0, err
    rows = [json.loads(x) for x in out[:-1]]
    s = json.loads(out[-1])
    assert rows == live_rows  # float32 rows kept as they are: every figure the same
    assert {k: s[k] for k in ("n", "kl_mean", "kl_max", "same_top", "first_flip")} == {
        k: live[k] for k in ("n", "kl_mean", "kl_max", "same_top", "first_flip")
    }
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"_logits_\x00\x00")
    rc, out, err = run(capsys, "--kld-base", str(bad), "--vs")
    assert rc == 1 and "is not a tokenstep base file" in err
    assert len(err.strip().splitlines()) == 1


def test_help_needs_no_vs_and_names_the_split(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--vs" in out and "--kld-base" in out and "--free" in out


@pytest.mark.parametrize(
    "flags", [("-np", "2"), ("--parallel", "1"), ("--context-full", "shift"), ("--keep", "4")]
)
def test_context_flags_that_mean_nothing_here_are_not_listed_and_are_refused(capsys, flags):
    """Each side's context holds one sequence, the text, which fits in -c: -np, --context-full
    and --keep would change nothing, so --help does not list them and they are refused, on
    either side of --vs, in one sentence."""
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "--context-full" not in out and "--keep" not in out
    assert "-np" not in out and "--parallel" not in out
    assert "-ub" in out and "-ctk" in out and "--api-key" in out  # the flags compare uses
    for argv in ((*flags, "--vs", "-ub", "1"), ("--vs", "-ub", "1", *flags)):
        rc, out_lines, err = run(capsys, "-p", PROMPT, *argv)
        assert rc == 1 and out_lines == [] and len(err.strip().splitlines()) == 1, err
        name = "-np" if flags[0] == "--parallel" else flags[0]  # llama.cpp's short name
        assert f"{name} means nothing to compare" in err
