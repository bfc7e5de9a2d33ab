"""The paths tree says what llama.cpp holds: a branch it calls cached comes back from parked
cells with nothing decoded again, and one it calls "recompute" is decoded again. The claim is
checked against llama.cpp's own memory state (``llama_memory_seq_pos_max``)."""

from __future__ import annotations

import llama_cpp

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tests.support.greedy import greedy_reply
from tui.engine.run import paths
from tui.widgets.paths import PathsPane

MESSAGE = "Write a long story about the sea."


async def _arrows(pilot, app, key: str, n: int) -> None:
    want = app.view.text.reply_tokens + (n if key == "right" else -n)
    for _ in range(n):
        await pilot.press(key)
    await wait_for(pilot, lambda: app.view.text.reply_tokens == want, f"{n} × {key}")


async def _force(pilot, app) -> None:
    want = app.view.text.reply_tokens + 1
    await pilot.press("f")
    await wait_for(pilot, lambda: app.view.text.reply_tokens == want, "the force")


async def _on_worker(pilot, app, fn):
    """Run ``fn`` on the worker thread (the only one that touches the context)."""
    box: list[object] = []
    app.worker.call_soon(lambda: box.append(fn()))
    await wait_for(pilot, lambda: bool(box), "the worker")
    return box[0]


async def _jump(pilot, app, tree: PathsPane, branch: int) -> int:
    """Jump to ``branch`` from the tree; the number of decode records the jump added."""
    eng = app.worker.engine
    before = await _on_worker(pilot, app, lambda: len(eng.records))
    tree.cursor = next(i for i, r in enumerate(app.view.paths.rows) if r.id == branch)
    note = app.view.paths.note
    await pilot.press("enter")
    await wait_for(
        pilot, lambda: app.view.action == "jump" and app.view.paths.note != note, "the jump"
    )
    return await _on_worker(pilot, app, lambda: len(eng.records)) - before


@run_async
async def test_the_issue_key_sequence_keeps_the_tree_true(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await _arrows(pilot, app, "right", 12)  # a long reply
        await pilot.press("escape", "w")
        tree = app.query_one(PathsPane)
        await wait_for(pilot, lambda: tree.has_focus, "the tree pane")
        await _arrows(pilot, app, "left", 5)
        await _force(pilot, app)
        await _arrows(pilot, app, "right", 4)
        await _arrows(pilot, app, "left", 3)
        await pilot.press("1", "down", "down")
        await _force(pilot, app)
        await _arrows(pilot, app, "right", 3)
        await pilot.press("w")
        await wait_for(pilot, lambda: tree.has_focus, "the tree pane again")
        await _on_worker(pilot, app, lambda: None)  # every command before is done
        eng = app.worker.engine
        start = app.view.text.reply_start
        seen: set[int] = set()
        cached_jumps = 0
        for _ in range(4):  # jump to each branch in turn; each jump leaves the live reply
            rows = [r for r in app.view.paths.rows if r.id and r.id not in seen]
            if not rows:
                break
            row = max(rows, key=lambda r: r.cached)  # the cached ones first
            seen.add(row.id)
            if row.cached:
                seq = row.seq
                held = await _on_worker(
                    pilot,
                    app,
                    lambda seq=seq: llama_cpp.llama_memory_seq_pos_max(
                        llama_cpp.llama_get_memory(eng.ctx), seq
                    ),
                )
                assert held >= start + row.n_tokens - 1, (row, held)
            decoded = await _jump(pilot, app, tree, row.id)
            note = app.view.paths.note
            assert note is not None
            if row.cached:
                cached_jumps += 1
                assert decoded == 0 and "replayed from the KV cache" in note, note
                assert "decoded again" not in note, note
            else:
                assert decoded >= 1 and "decoded again" in note, note
            assert not await _on_worker(pilot, app, lambda: eng.kv.check(eng.ctx))
        assert cached_jumps >= 1  # the branch the issue met: [cached: seq 1]


def test_holds_asks_llama_cpp(make_engine):
    """``paths.holds`` is llama.cpp's word: a parked path whose cells llama.cpp dropped, or a
    seq_id parked again with another path, is not held, whatever the bookkeeping says."""
    eng = greedy_reply(make_engine, 2, 4)
    first = eng.tokens
    seq = paths.park(eng)
    assert seq == 1
    mem = llama_cpp.llama_get_memory(eng.ctx)
    assert llama_cpp.llama_memory_seq_pos_max(mem, seq) == len(first) - 1
    assert paths.holds(eng, seq, first) and paths.holds(eng, seq, first[:-2])
    eng.rewind(3)
    eng.step(force=eng.vocab.tokenize(" Berlin")[0])
    assert paths.holds(eng, seq, first)  # seq 0 moved on; seq 1 still sees its cells
    assert not paths.holds(eng, seq, eng.tokens)  # the live text is not what seq 1 holds
    # a seq_id freed and parked again holds the new path, not the old one
    paths.drop(eng, seq)
    assert llama_cpp.llama_memory_seq_pos_max(mem, seq) == -1
    assert not paths.holds(eng, seq, first)
    again = paths.park(eng)
    assert again == seq and paths.holds(eng, seq, eng.tokens)
    assert not paths.holds(eng, seq, first)
    # llama.cpp dropping cells behind the bookkeeping's back: the parked record stays, the
    # cells go, and holds says so for the tokens past llama.cpp's last position only
    second = eng.tokens
    llama_cpp.llama_memory_seq_rm(mem, seq, len(second) - 2, -1)
    assert llama_cpp.llama_memory_seq_pos_max(mem, seq) == len(second) - 3
    assert not paths.holds(eng, seq, second)
    assert paths.holds(eng, seq, second[:-2])
