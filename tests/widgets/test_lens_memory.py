"""The Lens pane says what its observer context is (kernel, KV memory, from the same sentence
the attention pane uses) and what its head holds, array by array (issue #30's walk)."""

from __future__ import annotations

from tests.support.app import make_app, run_async, send, wait_for
from tui.worker.lens import head_note

WIDE = (200, 50)  # the summary's lines wrap less, so the words are found whole


def _text(widget) -> str:
    return " ".join(" ".join(widget.render_line(y).text.split()) for y in range(widget.size.height))


@run_async
async def test_lens_pane_names_its_context_and_each_array_of_its_head(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=WIDE) as pilot:
        await send(pilot, app, "The capital of France is")
        await wait_for(pilot, lambda: app.view.text.n_past > 0, "prefill")
        await pilot.press("escape")
        await pilot.press("8")
        await wait_for(pilot, lambda: app.view.lens and app.view.lens.step is not None, "lens")
        obs = app.worker.observers
        ctx = obs.ctx
        assert ctx is not None and ctx.head is not None
        lv = app.view.lens
        # the same source as the attention pane's status: the observer context's describe()
        assert lv.context == ctx.describe()
        assert (
            f"KV {ctx.kv_bytes / (1 << 20):.0f} MiB" in lv.context
            and "flash attention" in lv.context
        )
        head = ctx.head
        matrix = f"{head.out.nbytes / (1 << 20):.1f} MiB"
        assert head.out.nbytes == head.out.shape[0] * head.out.shape[1] * 4
        assert lv.head == head_note(head) and f", {matrix} + " in lv.head
        if head.block_abs is not None:  # SmolLM2's Q8_0 head: its rounding bounds, apart
            assert f"{head.block_abs.nbytes / (1 << 20):.1f} MiB of rounding bounds" in lv.head
        summary = app.query_one("#lens-summary")
        await wait_for(pilot, lambda: "flash attention" in _text(summary), "the context line")
        shown = _text(summary)
        assert "observer context of its own" in shown and matrix in shown
