"""The key bar says what the arrows do in the tab on screen: in every tab, the chip that names
← and → stands for the action Textual runs for them there (the focused pane's own binding or
the app's), and pressing them does that."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.app import TokenstepApp
from tui.widgets.keybar import SHORTER, KeyBar, bar_items
from tui.widgets.keys import KEYS, PANE_KEYS
from tui.widgets.run_chart import RunChart

MESSAGE = "Name a colour."
TAB_KEYS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "c", "w")


def _bar_text(app: TokenstepApp) -> str:
    bar = app.query_one(KeyBar)
    return str(bar.render())


def _check_arrows(app: TokenstepApp, tab: str) -> dict[str, str]:
    """For ← and →: the action Textual would run equals the one the bar's chip stands for,
    and the chip is on the bar. Returns key → the chip's words."""
    bar = app.query_one(KeyBar)
    active = app.screen.active_bindings
    text = _bar_text(app)
    out = {}
    for key in ("left", "right"):
        got = active[key]
        runs = got.binding.action if got.node is not app else f"app.{got.binding.action}"
        meaning = bar.meaning(key)
        assert meaning is not None, (tab, key)
        label, what, action = meaning
        assert action == runs, (tab, key, meaning, runs)
        shown = {f"{label} {w}" for w in (what, SHORTER.get(what, what))}
        assert any(chip in text for chip in shown), (tab, label, what, text)
        out[key] = what
    return out


@run_async
async def test_each_tab_names_what_its_arrows_do(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 3, "3 steps")
        await pilot.press("escape")
        seen = {}
        for tab in TAB_KEYS:
            await pilot.press(tab)
            await pilot.pause(0.1)
            seen[tab] = _check_arrows(app, tab)
        assert seen["1"] == {"left": "rewind", "right": "step"}
        assert seen["c"] == {"left": "cursor", "right": "cursor"}
        assert seen["6"] == {"left": "head", "right": "head"}
        assert seen["w"] == seen["1"]  # the tree takes ↑↓ and Enter, not the arrows
        assert seen["7"] == seen["1"]  # the anatomy scrolls with ↑↓; ← → stay rewind/step
        assert "↑↓ branch" in _bar_text(app) and "↑↓ pick" not in _bar_text(app)

        # and they do what the bar says: ← in the chart moves its cursor, never rewinds
        await pilot.press("c")
        chart = app.query_one(RunChart)
        await wait_for(pilot, lambda: chart.has_focus and chart.cursor == 2, "the chart")
        text = _bar_text(app)
        assert "→ step" not in text and "← back" not in text and "n step" in text
        await pilot.press("left")
        await wait_for(pilot, lambda: chart.cursor == 1, "the chart cursor")
        assert app.view.text.reply_tokens == 3
        await pilot.press("1")
        await pilot.pause(0.1)
        text = _bar_text(app)
        assert "→ step" in text and "← back" in text
        await pilot.press("left")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "the rewind")


def test_every_pane_key_is_a_real_binding_of_its_pane():
    """The panes' BINDINGS are built from keys.PANE_KEYS: what the bar and help list is bound."""
    from tui.widgets.attention import AttentionPane
    from tui.widgets.attention_tabs import AnatomyTab
    from tui.widgets.paths import PathsPane

    panes = (
        ("attention", AttentionPane),
        ("anatomy", AnatomyTab),
        ("run", RunChart),
        ("paths", PathsPane),
    )
    for pane, cls in panes:
        bound = {(b.key, b.action) for b in cls.BINDINGS}  # type: ignore[union-attr]
        assert bound == {(k.keys, k.action) for k in PANE_KEYS[pane]}, pane
        items = [item for item, _ in bar_items(pane)]
        assert items[0][3] == "pane"  # the pane's own keys come first
    # a global key the pane does not take keeps its chip as it was
    assert any(item[0] == "space" for item, _ in bar_items("run"))
    # every labelled key has a chip: all of them while speculation runs, the others always
    assert len([k for k in KEYS if k.label and not k.spec and k.bar]) <= len(bar_items(None))
    assert len([k for k in KEYS if k.label and k.bar]) <= len(bar_items(None, spec=True))
    # a key kept off the bar (the tour's l) has no chip, and still a help line
    off = [k for k in KEYS if not k.bar]
    assert off and all(k.help for k in off)
    assert not {k.label for k in off} & {item[0] for item, _ in bar_items(None, spec=True)}
    # the --spec-type keys get a chip only while speculation runs
    spec_labels = {k.label for k in KEYS if k.spec and k.label}
    assert spec_labels and spec_labels <= {item[0] for item, _ in bar_items(None, spec=True)}
    assert not spec_labels & {item[0] for item, _ in bar_items(None)}


@run_async
async def test_z_enlarges_the_bottom_pane_and_gives_it_back(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "2 steps")
        await pilot.press("escape", "c")
        chart = app.query_one(RunChart)
        await wait_for(pilot, lambda: chart.has_focus, "the chart")
        tabs = app.query_one("#tabs")
        small = (tabs.size.width, tabs.size.height)
        assert chart.small and not app.query_one("#run-entropy").display  # 80x24: too short
        await pilot.press("z")
        await wait_for(pilot, lambda: tabs.size.height > small[1], "the enlarged pane")
        assert tabs.size.width > small[0] and tabs.size.height >= 2 * small[1]
        assert not app.query_one("#left").display and not app.query_one("#pipeline").display
        assert not chart.small and app.query_one("#run-entropy").display
        assert "z again" in app.view.notice or "z again" in str(app.query_one("#notice").render())
        await pilot.press("down")  # the other plot
        assert chart.showing == "p" and app.query_one("#run-p").display
        assert not app.query_one("#run-entropy").display
        await pilot.press("z")
        await wait_for(pilot, lambda: tabs.size.height == small[1], "the pane back")
        assert app.query_one("#left").display and chart.small
        await pilot.press("left")  # the chart still has the keys: the cursor moves
        assert app.view.text.reply_tokens == 2
