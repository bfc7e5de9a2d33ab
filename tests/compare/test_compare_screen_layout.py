"""The compare screen's layout on records built by hand from fixed numbers
(tests/support/compare_records.py): its help, its quit key, a remote B's bound, the free-running texts
and a text far longer than the strip. What a real run shows is checked against its records in
tests/compare/test_compare_screen.py."""

from __future__ import annotations

import dataclasses

from tests.support.compare_records import drive, fixed_result, run, screen_text
from tui.compare.help import CompareHelp
from tui.compare.records import Result
from tui.compare.screen import CompareApp
from tui.compare.strip import TokenStrip

SIZE = (140, 42)


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
    assert "1 is B's top-1" in flat  # ranks count from 1 where a person reads them


def test_q_quits_with_0():
    app = CompareApp(fixed_result())

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")
            await pilot.pause()

    run(go())
    assert app.return_code == 0


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


def test_b_s_pick_outside_its_top_k_is_named_by_its_piece():
    """Free-running, B may pick a token in neither top K (its chain samples past them): the
    head line names it by the record's piece_b, not by an id."""
    r = fixed_result(free=True)
    at = r.summary.parted_at
    ps = list(r.positions)
    ps[at] = dataclasses.replace(ps[at], token_b=48_000, piece_b=" porch")
    app = CompareApp(dataclasses.replace(r, positions=tuple(ps)))

    async def go() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return screen_text(app)

    text = run(go())
    assert app.cursor == at  # a free run opens where the texts part
    assert "B picked ' porch'" in text and "#48000" not in text


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
