"""The compare screen, driven by its keys, read back as drawn and checked against the records.

The results come from real runs of the bundled model through ``tokenstep compare``'s own run
function: A with an f16 KV cache against B with q4_0, a run against itself and against another
sampler, a free-running run whose texts part, and B on a real llama-server (top K only). Layout
on records built by hand is in tests/compare/test_compare_screen_layout.py."""

from __future__ import annotations

import pytest

from tests.support.compare_records import drive, run, screen_text
from tests.support.llama_server import llama_server  # noqa: F401 - the module's fixture
from tui.compare.candidates import fine_dp, fine_p
from tui.compare.cli import parse_sides
from tui.compare.records import Result
from tui.compare.run import run_compare
from tui.compare.screen import CompareApp
from tui.compare.strip import CURSOR, FLIP, TokenStrip, kl_band
from tui.compare.summary import nats
from tui.trace_cli import config_from_args, settings_from_args
from tui.widgets.common import fmt_p

TEXT = (
    "The cat sat on the mat because it was tired. Then the dog came in, sat down beside it "
    "and the two of them slept until the sun went down over the quiet little house."
)
SIZE = (140, 42)


def compare(argv: list[str]) -> Result:
    """A finished run, as ``tokenstep compare ARGV`` makes it before it draws."""
    a, b, differs = parse_sides(argv)
    configs = (config_from_args(a), config_from_args(b))
    settings = (settings_from_args(a), settings_from_args(b))
    return run_compare(a, b, configs, settings, differs)


def real_run(*b_flags: str) -> Result:
    return compare(["-p", TEXT, "-c", "256", "-fa", "on", "--vs", *b_flags])


@pytest.fixture(scope="module")
def q4_run() -> Result:
    return real_run("-ctk", "q4_0", "-ctv", "q4_0")


def assert_detail_is_the_record(app: CompareApp) -> None:
    """What the cursor opened is the cursor's record: its position, KL, max |Δlogit|, flip,
    Δp and rank, and every row of both top-K lists with its logit and p."""
    p = app.position
    assert p is not None
    text = screen_text(app)
    assert f"position {p.position} " in text
    kl = "KL bound" if app.result.summary.kl_is_bound else "KL"
    assert f"{kl} {nats(p.kl)} nats" in text
    assert f"max |Δlogit| {p.max_abs_dlogit:.4f}" in text
    assert f"Δp {fine_dp(p.dp)}" in text
    assert f"p {fine_p(p.p_a)} in A, {fine_p(p.p_b)} in B" in text
    if p.rank_in_b is None:
        assert "not in B" in text
    else:  # a person reads ranks from 1: B's top-1 is rank 1 (the JSON's rank_in_b is 0)
        assert f"rank in B {p.rank_in_b + 1}" in text
    assert ("same top-1" in text) == p.same_top
    assert ("top-1 flips" in text) == (not p.same_top)
    lines = text.splitlines()
    for i, (ca, cb) in enumerate(zip(p.top_a, p.top_b, strict=True), start=1):
        row = next(line for line in lines if line.lstrip().startswith(f"{i}  '"))
        left, right = row[: len(row) // 2], row[len(row) // 2 :]
        assert f"{ca.logit:.3f}" in left and fmt_p(ca.p) in left, (row, ca)
        assert f"{cb.logit:.3f}" in right and fmt_p(cb.p) in right, (row, cb)
    strip = app.query_one(TokenStrip)
    assert strip.cursor == p.position + 1
    assert strip.atoms[p.position + 1].segments[0].style.bgcolor == CURSOR.bgcolor


def test_the_keys_move_the_cursor_and_both_lists_follow(q4_run: Result):
    ps = q4_run.positions
    flips = [i for i, p in enumerate(ps) if not p.same_top]
    assert flips, "q4_0 against f16 flips no top-1 on this text: the test needs one"
    by_kl = {p.position: i for i, p in enumerate(ps)}
    ranking = [by_kl[pos] for pos in q4_run.summary.by_kl]
    expect = {
        "right": 1,
        "end": len(ps) - 1,
        "home": 0,
        "n": flips[0],
        "N": flips[0],  # none before the first flip: the cursor stays
        "k": ranking[0],
        "K": ranking[0],  # not a key: nothing moves
    }
    seen: list[str] = []

    def check(app: CompareApp, key: str) -> None:
        seen.append(key)
        if key in expect:
            assert app.cursor == expect[key], key
        assert_detail_is_the_record(app)

    app = CompareApp(q4_run)
    run(drive(app, list(expect), check))
    assert seen == list(expect)

    # k walks down the ranking; any other move starts it from the top again
    def walk(app: CompareApp, key: str) -> None:
        walked.append(app.cursor)

    walked: list[int] = []
    run(drive(CompareApp(q4_run), ["k", "k", "k", "right", "k"], walk))
    assert walked[:3] == ranking[:3]
    assert walked[4] == ranking[0]
    # n visits every flip in order, N comes back
    walked = []
    run(drive(CompareApp(q4_run), ["n"] * len(flips) + ["N"], walk))
    assert walked[: len(flips)] == flips
    assert walked[-1] == (flips[-2] if len(flips) > 1 else flips[0])


def test_the_summary_is_the_records(q4_run: Result):
    s = q4_run.summary
    app = CompareApp(q4_run)

    async def go() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return screen_text(app)

    text = run(go())
    assert s.kv_saving is not None and s.kv_saving > 0.5  # q4_0 against f16: well under half
    assert f"B's KV cache takes {1 - s.kv_saving:.0%} of A's" in text
    assert f"top-1 differs at {s.n_flips} of {s.n} positions" in text
    for figure in (s.kl_mean, s.kl_median, s.kl_p99, s.kl_max):
        assert nats(figure) in text
    assert f"same top {s.same_top * 100:.1f}%" in text
    assert f"top-1 differs at {s.n_flips} of {s.n:,} positions, first at {s.first_flip}" in text
    assert s.a.label in text and s.b.label in text
    assert "KL(A‖B), nats:" in text and "bound" not in text


def test_the_strip_colours_each_token_by_the_kl_of_its_prediction(q4_run: Result):
    app = CompareApp(q4_run)

    async def go() -> TokenStrip:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("end")  # the cursor away from position 0's token
            await pilot.pause()
            return app.query_one(TokenStrip)

    strip = run(go())
    coloured = {p.position + 1: p for p in q4_run.positions}
    for i, atom in enumerate(strip.atoms):
        style = atom.segments[0].style
        if i == strip.cursor:
            assert style.bgcolor == CURSOR.bgcolor
        elif i in coloured:
            p = coloured[i]
            assert style.bgcolor is not None and style.bgcolor.name == kl_band(p.kl), i
            assert bool(style.underline) == (not p.same_top) == (style.color == FLIP.color)
        else:
            assert style.bgcolor is None  # the first token: nothing predicted it
    assert "".join("".join(s.text for s in a.segments) for a in strip.atoms) == "".join(
        q4_run.pieces
    ).replace("\n", "↵")


@pytest.mark.parametrize("b_flags", [(), ("--temp", "0.5")], ids=["itself", "sampler-only"])
def test_a_run_compared_with_itself_or_another_sampler_says_so(b_flags):
    r = real_run(*b_flags)
    s = r.summary
    assert s.kl_max == 0.0 and s.same_top == 1.0 and s.n_flips == 0
    assert s.shared_logits == bool(b_flags)  # teacher-forced, a sampler alone shares the logits
    app = CompareApp(r)
    notes: list[str] = []

    async def go() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("n")
            await pilot.pause()
            notes.extend(str(n.message) for n in app._notifications)
            return screen_text(app)

    text = run(go())
    assert f"top-1 differs at 0 of {s.n:,} positions." in text
    assert "same top 100.0%" in text and "max 0 nats" in text
    assert ("both sides share A's logits" in text) == s.shared_logits
    assert app.cursor == 0 and any("No top-1 flip after" in n for n in notes)


def test_free_running_shows_both_texts_where_they_part_and_the_lists_there():
    r = compare(
        ["-p", "Once upon a time", "-c", "256", "--free", "-n", "24", "--temp", "1.5",
         "--vs", "-s", "7"]
    )  # fmt: skip
    s = r.summary
    assert s.mode == "free" and s.parted_at is not None, "two seeds at temp 1.5 never parted"
    app = CompareApp(r)

    async def go() -> tuple[int, str, str]:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            at = app.cursor
            await pilot.press("t")
            await pilot.pause()
            free = screen_text(app)
            await pilot.press("t")
            await pilot.pause()
            return at, free, screen_text(app)

    at, free, back = run(go())
    p = r.positions[at]
    assert p.position == s.parted_at  # it opens where they part
    assert f"The texts part at position {s.parted_at}" in free
    flat = " ".join(free.split())
    for text in (s.text_a, s.text_b):
        for line in text.splitlines():
            for word in line.split()[:3]:
                assert word in flat, word
    # both lists at the parting, with B's own pick named
    assert f"position {s.parted_at} " in free and p.token_b != p.token and "B picked" in free
    strip_title = f"A's text (B was fed its own picks after position {s.parted_at})"
    assert strip_title not in free and strip_title in back


def test_a_remote_b_on_a_real_llama_server_says_its_kl_is_a_bound(llama_server):  # noqa: F811
    r = compare(
        ["-p", TEXT, "-c", "256", "-fa", "off", "--vs", "--server", llama_server.url,
         "--n-probs", "20"]
    )  # fmt: skip
    s = r.summary
    assert s.kl_is_bound and s.b.remote and s.b.kv_bytes is None
    outside = [i for i, p in enumerate(r.positions) if p.rank_in_b is None]
    texts: list[str] = []

    def check(app: CompareApp, key: str) -> None:
        assert_detail_is_the_record(app)  # "not in B's top K" where B did not list the token
        texts.append(screen_text(app))

    keys = ["k", "n", "end"] + (["home"] + ["right"] * outside[0] if outside else [])
    run(drive(CompareApp(r), keys, check))
    text = texts[0]
    assert "KL bound mean" in text and "each KL is a bound from those" in text
    assert "B's KV cache is on the server" in text and "KL(A‖B) bound, nats:" in text
    assert "log p" in text and "KL bound " in text.split("position ", 1)[1]


def test_on_a_terminal_tokenstep_compare_opens_the_screen_and_q_quits_with_0(tmp_path):
    """``tokenstep compare`` with stdout a terminal (a real pty, Textual's own driver): the
    screen opens on the finished run, n opens the first flip, q quits with exit code 0."""
    from tests.support.pty import Terminal

    flags = (
        "compare",
        "-p",
        TEXT,
        "-c",
        "256",
        "-fa",
        "on",
        "--vs",
        "-ctk",
        "q4_0",
        "-ctv",
        "q4_0",
    )
    term = Terminal(tmp_path, *flags, cols=100, rows=30)
    try:
        term.until(b"B's KV cache takes", "the compare screen")
        term.until(b"position 0", "the cursor at the first position")
        since = term.mark()
        term.write(b"n")
        term.until(b"top-1 flips", "the first flip", since)
        term.write(b"q")
        assert term.proc.wait(120) == 0
    finally:
        term.close()
