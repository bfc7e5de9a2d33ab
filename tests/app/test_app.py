"""The app, driven by Textual's Pilot on the real bundled model (greedy unless a test needs the
sampler). Each test reads what the panes show and checks it against an oracle: llama-cpp-python's
``Llama`` for the tokens, NumPy for the temperature math, ``json`` for the saved file."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest
from llama_cpp import Llama

from tests.support.app import MESSAGE, SIZE, make_app, prompt_for, run_async, send, wait_for
from tests.support.cli import ROOT
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.widgets.batch import BatchPane
from tui.widgets.kvcache import KVCachePane
from tui.widgets.logits import LogitsPane
from tui.widgets.mask import CausalMaskPane
from tui.widgets.pipeline import PipelinePane
from tui.widgets.text import ConversationPane
from tui.widgets.tokens import TokensPane
from tui.worker.session_store import read_session


@run_async
async def test_send_runs_the_prefill(make_engine, model, tmp_path):
    expected = prompt_for(model, MESSAGE)
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert app.focused is app.query_one("#chat")  # the chat box has focus at start
        await send(pilot, app, MESSAGE)
        v = app.view
        assert v is not None
        assert list(v.text.tokens) == expected
        await pilot.press("4")  # the KV cache pane
        assert app.query_one(KVCachePane).used == len(expected)
        # The batch pane holds the prompt, with logits only on its last token.
        await pilot.press("2")
        recs = app.query_one(BatchPane).view.batch.last_records
        batch = [t for r in recs for t in r.call.tokens]
        assert [t.id for t in batch] == expected
        assert [t.logits for t in batch] == [False] * (len(expected) - 1) + [True]
        assert [t.pos for t in batch] == list(range(len(expected)))
        # The pipeline lit tokenize..logits, and the text shows the message.
        assert v.batch.lit == (0, 1, 2, 3)
        assert MESSAGE in app.query_one(ConversationPane).plain
        assert app.query_one("#chat").value == ""
        # Greedy: the next pick is the highest logit.
        cands = app.query_one(LogitsPane).view.logits.candidates
        assert v.logits.next_pick == cands[0].id == max(cands, key=lambda c: c.logit).id


@run_async
async def test_stepping_adds_tokens_cells_and_mask_rows(make_engine, model, model_path, tmp_path):
    n = 4
    prompt = prompt_for(model, MESSAGE)
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        for _ in range(n):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == n, f"{n} steps")
        await pilot.press("4")  # the KV cache pane
        v = app.view
        new = list(v.text.tokens[len(prompt) :])
        assert len(new) == n
        assert app.query_one(KVCachePane).used == len(prompt) + n
        await pilot.press("5")  # the causal mask pane
        mask = app.query_one(CausalMaskPane)
        assert mask.n_rows == len(prompt) + n
        assert mask.count_rows() == math.ceil(math.ceil((len(prompt) + n) / mask.factor) / 2)
        text = b"".join(v.text.pieces[len(prompt) :]).decode("utf-8", errors="replace")
        assert text.strip() and text in app.query_one(ConversationPane).plain
        assert v.header.n_records == 1 + n  # one prefill call, then one llama_decode per step
    # Oracle: llama-cpp-python's own greedy generation from the same prompt.
    llm = Llama(model_path=str(model_path), n_ctx=512, n_threads=2, verbose=False)
    try:
        theirs = []
        for t in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0):
            theirs.append(t)
            if len(theirs) == n:
                break
    finally:
        llm.close()
    assert new == theirs


@run_async
async def test_rewind_drops_a_kv_cell_without_decoding(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("4", "right", "right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 3, "3 steps")
        before = app.view
        text_before = app.query_one(ConversationPane).plain
        await pilot.press("left")
        await wait_for(pilot, lambda: app.view.action == "rewind", "the rewind")
        v = app.view
        assert app.query_one(KVCachePane).used == before.kv.kv_used - 1
        assert v.text.tokens == before.text.tokens[:-1]
        assert v.header.n_records == before.header.n_records  # nothing was decoded
        assert app.query_one(ConversationPane).plain != text_before
        # The logits for the new last token came back from memory: the pick is the same
        # token that was sampled there before.
        assert v.logits.next_pick == before.text.tokens[-1]


@run_async
async def test_force_puts_the_highlighted_piece_in_the_text(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("down", "down")
        row = app.query_one(LogitsPane).highlighted
        assert row is not None and row.id != app.view.logits.next_pick  # not what greedy would take
        await pilot.press("f")
        await wait_for(pilot, lambda: app.view.action == "force", "the forced step")
        v = app.view
        assert v.text.tokens[-1] == row.id
        assert v.text.last_pick is not None and v.text.last_pick.forced and v.text.last_pick.id == row.id
        piece = row.piece.decode("utf-8", errors="replace")
        assert app.query_one(ConversationPane).plain.rstrip("▌").endswith(piece)


@run_async
async def test_sampler_keys_recompute_probabilities_without_decoding(make_engine, tmp_path):
    settings = SamplerSettings(temp=0.8, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        before = app.view
        await pilot.press("T")  # temperature up one rung: 0.8 -> 0.9
        await wait_for(pilot, lambda: app.view.settings.temp != before.settings.temp, "temp")
        v = app.view
        assert v.settings.temp == pytest.approx(0.9)
        assert v.header.n_records == before.header.n_records and v.kv.kv_used == before.kv.kv_used  # no decode
        assert [c.id for c in v.logits.candidates] == [c.id for c in before.logits.candidates]
        assert [c.p for c in v.logits.candidates] == [c.p for c in before.logits.candidates]
        assert [c.p_final for c in v.logits.candidates] != [c.p_final for c in before.logits.candidates]
        # NumPy oracle: with only temperature in the chain, p' ratios are exp(dlogit / T).
        a, b = v.logits.candidates[0], v.logits.candidates[1]
        assert a.p_final / b.p_final == pytest.approx(np.exp((a.logit - b.logit) / 0.9), rel=1e-3)
        # top-p down from 1.0 to 0.98 cuts the tail: survivors drop, cut marks appear.
        await pilot.press("p")
        await wait_for(pilot, lambda: app.view.settings.top_p < 1.0, "top-p")
        v2 = app.view
        stage = {s.name: s.n for s in v2.logits.chain.stages}
        assert stage["top-p"] < stage["top-k"]
        assert v2.header.n_records == before.header.n_records
        kept = [c for c in v2.logits.candidates if not c.cut_by]
        assert sum(c.p_final for c in kept) <= 1.0 + 1e-6
        assert all(c.p_final == 0 for c in v2.logits.candidates if c.cut_by)


@run_async
async def test_save_writes_json_lines(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    target = tmp_path / "saved" / "my-session.jsonl"
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "2 steps")
        await pilot.press("ctrl+s")
        await pilot.pause()
        box = app.screen.query_one("#save-path")
        box.value = str(target)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.view.header.last_saved == str(target), "the save")
        n_records = app.view.header.n_records
    lines = target.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]  # every line is valid JSON
    header, records = read_session(target)
    assert header["conversation"][0] == {"role": "user", "content": MESSAGE}
    assert header["conversation"][1]["role"] == "assistant"
    assert header["settings"]["temp"] == 0.0
    assert len(records) == n_records == len(rows) - 1
    assert [r["step"] for r in records] == list(range(n_records))
    assert records[0]["phase"] == "prefill" and records[1]["phase"] == "decode"
    assert records[1]["sampled"]["id"] == records[2]["batch"][0]["id"]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_ctrl_c_during_a_reply_exits_0_and_keeps_the_session(tmp_path):
    """The real command in a pseudo-terminal: send a prompt, press Ctrl+C while it decodes."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "TOKENSTEP_AUTOSAVE_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui", "--raw", "-c", "512", "-t", "2"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def pump(until: Callable[[], bool], timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and not until():
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    seen.extend(os.read(master, 65536))
                except OSError:
                    return

    try:
        pump(lambda: b"waiting for a message" in seen, 60)
        os.write(master, b"Once upon a time\r")
        pump(lambda: b"generating" in seen, 60)
        assert b"generating" in seen
        os.write(master, b"\x03")  # Ctrl+C while the reply is being decoded
        pump(lambda: proc.poll() is not None, 60)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    saved = list(tmp_path.glob("session-*.jsonl"))
    assert len(saved) == 1
    header, records = read_session(saved[0])
    assert header["mode"] == "raw" and records[0]["phase"] == "prefill"
    assert "".join(b["piece"] for b in records[0]["batch"]).strip() == "Once upon a time"


@run_async
async def test_split_utf8_is_joined_in_the_text_and_spelled_out_on_the_chips(make_engine, tmp_path):
    text = "日本語のテキスト"  # SmolLM2 splits these characters over byte-level pieces
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, text)
        v = app.view
        assert b"".join(v.text.pieces).decode("utf-8") == text
        broken = [p for p in v.text.pieces if not _valid_utf8(p)]
        assert broken  # some pieces are not UTF-8 on their own
        assert app.query_one(ConversationPane).plain.startswith(text)
        await pilot.press("1")
        tokens = app.query_one(TokensPane)
        chips = tokens.chips(v).plain
        assert "<0xE6><0x97>" in tokens.plain  # as drawn
        assert "<0xE6><0x97>" in chips and "<0xA5>" in chips  # 日 = E6 97 A5, split 2 + 1
        assert text not in chips
        assert f"{len(v.text.tokens)} tokens, {len(text)} chars" in str(tokens.border_title)


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@run_async
async def test_model_metadata_is_drawn_literally(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    app.engine_name = "[bold red]pwned[/] \x1b[31mred"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        header = app.query_one("#header")
        shown = header.render().plain
        assert "[bold red]pwned[/]" in shown  # markup stays text
        assert "\x1b" not in shown and "\\x1b[31mred" in shown  # ESC is spelled out


@run_async
async def test_a_prefill_longer_than_n_batch_shows_its_chunks(make_engine, model, tmp_path):
    prompt = prompt_for(model, MESSAGE)
    engine = make_engine(SamplerSettings(temp=0.0), n_batch=16, n_ubatch=8)
    app = TokenstepApp(engine, autoplay=False, autosave_dir=None, close_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("2")
        batch = app.query_one(BatchPane)
        calls = [r for r in batch._rows if r[0] == "call"]
        ubatch_rules = [r for r in batch._rows if r[0] == "ubatch"]
        tokens = [r for r in batch._rows if r[0] == "token"]
        n_calls = math.ceil(len(prompt) / 16)
        assert len(calls) == n_calls and len(tokens) == len(prompt)
        # Every full call of 16 tokens is two ubatches of 8 (a rule at 0 and at 8).
        full = len(prompt) // 16
        assert len(ubatch_rules) >= 2 * full
        line = "".join(s.text for s in batch.build_row(1, 120))
        assert f"llama_decode 1/{n_calls}" in line and "2 ubatches" in line
        assert f"{n_calls} calls" in app.query_one(PipelinePane).facts(app.view)[1]


@run_async
async def test_views_keep_arriving_while_help_and_save_are_open(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Hi", "enter")
        await pilot.press("question_mark")  # help over a reply that is playing
        await wait_for(
            pilot,
            lambda: app.view is not None and app.view.activity == "done",
            "the reply to end under the help screen",
        )
        assert app.main.query_one(KVCachePane) is not None
        await pilot.press("escape", "ctrl+s")
        await pilot.press("escape")
        assert len(app.screen_stack) == 1
        assert app.view.text.reply_tokens > 0
