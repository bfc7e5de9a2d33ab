"""The compare screen, driven by its keys, read back as drawn and checked against the records.

The results come from real lockstep runs of the bundled model (``tokenstep compare``'s own
run function: A with an f16 KV cache, B with q4_0, and a run compared with itself); the
free-running and remote-B layouts, which this run function does not produce yet, use records
built by hand (tests/compare_records.py), for their layout only."""

from __future__ import annotations

import asyncio
import dataclasses
import io

import pytest
from rich.console import Console

from tui.commands import config_from_args, settings_from_args
from tui.compare.candidates import fine_dp, fine_p
from tui.compare.cli import parse_sides
from tui.compare.help import CompareHelp
from tui.compare.records import Result
from tui.compare.run import run_compare
from tui.compare.screen import CompareApp
from tui.compare.strip import CURSOR, FLIP, TokenStrip, kl_band
from tui.compare.summary import nats
from tui.widgets.common import fmt_p

from .compare_records import fixed_result

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


@pytest.fixture(scope="module")
def same_run() -> Result:
    return real_run()


def screen_text(app: CompareApp) -> str:
    """The whole screen as plain text, as the terminal shows it."""
    w, h = app.size
    con = Console(width=w, height=h, file=io.StringIO(), record=True, color_system=None)
    con.print(
        app.screen._compositor.render_update(
            full=True, screen_stack=app._background_screens, simplify=True
        )
    )
    return con.export_text()


def run(coro):
    return asyncio.run(coro)


async def drive(app: CompareApp, keys: list[str], check) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
            check(app, key)


def assert_detail_is_the_record(app: CompareApp) -> None:
    """What the cursor opened is the cursor's record: its position, KL, max |Δlogit|, flip,
    Δp and rank, and every row of both top-K lists with its logit and p."""
    p = app.position
    assert p is not None
    text = screen_text(app)
    assert f"position {p.position} " in text
    assert f"KL {nats(p.kl)} nats" in text
    assert f"max |Δlogit| {p.max_abs_dlogit:.4f}" in text
    assert f"Δp {fine_dp(p.dp)}" in text
    assert f"p {fine_p(p.p_a)} in A, {fine_p(p.p_b)} in B" in text
    assert f"rank in B {p.rank_in_b}" in text if p.rank_in_b is not None else "not in B" in text
    assert ("same top-1" in text) == p.same_top
    assert ("top-1 flips" in text) == (not p.same_top)
    lines = text.splitlines()
    for i, (ca, cb) in enumerate(zip(p.top_a, p.top_b, strict=True)):
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


def test_help_lists_every_key_of_the_table_and_closes():
    from tui.compare.screen_keys import KEYS

    app = CompareApp(fixed_result())

    async def go() -> tuple[str, bool, bool]:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
            text = screen_text(app)
            shown = isinstance(app.screen, CompareHelp)
            await pilot.press("escape")
            await pilot.pause()
            return text, shown, isinstance(app.screen, CompareHelp)

    text, shown, still = run(go())
    assert shown and not still
    flat = " ".join(text.split())
    for k in KEYS:
        if k.label and k.action != "toggle_mode":  # a teacher-forced run: no free view key
            assert k.help.split(";")[0][:30] in flat, k.label


def test_q_quits_with_0():
    app = CompareApp(fixed_result())

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")
            await pilot.pause()

    run(go())
    assert app.return_code == 0


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


def test_free_running_layout_from_fixed_records():
    r = fixed_result(free=True)
    app = CompareApp(r)

    async def go() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("t")
            await pilot.pause()
            return screen_text(app)

    free = run(go())
    assert "The texts part at position 4" in free
    assert "The cat sat on the couch and slept." in free and "tired." in free


def test_a_remote_b_says_its_kl_is_a_bound():
    app = CompareApp(fixed_result(remote=True))

    async def go() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return screen_text(app)

    text = run(go())
    assert "KL bound mean" in text and "each KL is a bound from those" in text
    assert "B's KV cache is on the server" in text
    assert "KL(A‖B) bound, nats:" in text


def test_the_strip_keeps_the_cursor_in_view_on_a_long_text():
    """Fixed records repeated 40 times (640 positions, far more lines than the strip has):
    End, Home, n and k each leave the cursor's line on screen."""
    r = fixed_result()
    m = len(r.pieces)
    ps = tuple(
        dataclasses.replace(p, position=p.position + c * m) for c in range(40) for p in r.positions
    )
    flips = tuple(p.position for p in ps if not p.same_top)
    summary = dataclasses.replace(
        r.summary, n=len(ps), by_kl=tuple(p.position for p in sorted(ps, key=lambda p: -p.kl))
    )
    long = Result(tokens=r.tokens * 40, pieces=r.pieces * 40, positions=ps, summary=summary)
    app = CompareApp(long)
    seen: list[tuple[str, int, int, int, int]] = []
    lines: list[int] = []

    def check(app: CompareApp, key: str) -> None:
        strip = app.query_one(TokenStrip)
        lines.append(len(strip.flow.lines))
        seen.append(
            (key, app.cursor, strip.cursor_row(), int(strip.scroll_offset.y), strip.size.height)
        )

    run(drive(app, ["end", "home", "n", "end", "N", "k"], check))
    assert lines[0] > 2 * seen[0][4]  # the text is far longer than the strip
    for key, _, row, top, height in seen:
        assert top <= row < top + height, (key, row, top, height)
    assert [c for _, c, *_ in seen] == [len(ps) - 1, 0, 4, len(ps) - 1, len(ps) - 1 - 1, 14]
    assert ps[seen[4][1]].position == flips[-1]


def test_on_a_terminal_tokenstep_compare_opens_the_screen_and_q_quits_with_0(tmp_path):
    """``tokenstep compare`` with stdout a terminal (a real pty, Textual's own driver): the
    screen opens on the finished run, n opens the first flip, q quits with exit code 0."""
    from .test_paste_pty import Terminal

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
