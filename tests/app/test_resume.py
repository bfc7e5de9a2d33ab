"""``tokenstep --resume FILE`` on the real bundled model: an autosaved greedy turn comes back
with its conversation, its settings and the same context tokens in a freshly prefilled cache;
a missing or damaged file is one sentence and a non-zero exit before the UI starts."""

from __future__ import annotations

import json
import threading

import llama_cpp
import numpy as np

from tests.support.app import SIZE, run_async, wait_for
from tests.support.cli import run_cli
from tui.app import TokenstepApp
from tui.args import parse
from tui.engine import SamplerSettings
from tui.trace_cli import engine_from_args
from tui.widgets.text import ConversationPane
from tui.worker.resume import apply_to_args, load_header, restore
from tui.worker.session_store import read_session

MESSAGE = "Write one sentence about the sea."
SETTINGS = SamplerSettings(temp=0.0, top_k=7, top_p=0.9, min_p=0.02, seed=1234)


async def on_worker(pilot, app: TokenstepApp, fn):
    """Run ``fn(engine)`` on the worker's decode thread, as a queued command."""
    ctl, out, done = app.worker, {}, threading.Event()

    def run() -> None:
        out["v"] = fn(ctl.engine)
        done.set()

    ctl.call_soon(run)
    await wait_for(pilot, done.is_set, "the worker")
    return out["v"]


async def autosaved_turn(make_engine, tmp_path):
    """One greedy chat turn played to its end; the autosave file it leaves."""
    engine = make_engine(SETTINGS.copy(), n_ctx=1024)
    app = TokenstepApp(engine, autosave_dir=tmp_path / "autosave", close_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*MESSAGE, "enter")
        await wait_for(
            pilot,
            lambda: (
                app.view is not None
                and app.view.activity == "done"
                and app.view.header.last_saved == app.view.header.autosave_path
            ),
            "the reply and its autosave",
        )
        saved = app.view.header.autosave_path
        shown = app.query_one(ConversationPane).plain
    assert saved is not None
    return saved, shown


@run_async
async def test_resume_restores_messages_settings_and_the_cache(make_engine, model_path, tmp_path):
    saved, shown = await autosaved_turn(make_engine, tmp_path)
    header, _records = read_session(saved)
    assert [m["role"] for m in header["conversation"]] == ["user", "assistant"]
    # Resume in a new app whose engine starts with other settings and an empty cache.
    args = parse(["--resume", saved, "-t", "2"])[1]
    hdr = load_header(args.resume)
    apply_to_args(args, hdr)
    engine = engine_from_args(args)
    try:
        assert engine.settings.to_dict() == SETTINGS.to_dict()
        assert engine.n_ctx == 1024
        app = TokenstepApp(
            engine,
            raw=args.raw,
            prefix_cache=not args.no_prefix_cache,
            autosave_dir=tmp_path / "autosave2",
            close_engine=False,
        )
        restore(app.worker, hdr, saved)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.view is not None, "the first view")
            v = app.view
            assert v.action == "resume" and "Resumed" in v.notice and saved in v.notice
            assert [(m.role, m.content) for m in v.text.messages] == [
                (m["role"], m["content"]) for m in header["conversation"]
            ]
            assert v.settings.to_dict() == SETTINGS.to_dict()
            assert list(v.text.tokens) == header["context_tokens"]
            app._draw_heavy()
            assert app.query_one(ConversationPane).plain.rstrip("▌") in shown
            got = await on_worker(
                pilot,
                app,
                lambda e: (list(e.tokens), e.kv.check(e.ctx), np.array(e.logits), e.kv.used),
            )
            tokens, problems, logits, used = got
            assert tokens == header["context_tokens"] and used == len(tokens)
            assert problems == []
            next_pick = app.view.logits.next_pick
    finally:
        engine.close()
    # The re-prefilled cache gives the logits a cold llama-cpp-python context gives.
    llm = llama_cpp.Llama(
        model_path=str(model_path), n_ctx=1024, n_threads=2, logits_all=True, verbose=False
    )
    try:
        llm.eval(header["context_tokens"])
        theirs = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    finally:
        llm.close()
    assert int(np.argmax(logits)) == next_pick == theirs


def test_resume_of_a_missing_file_is_one_sentence(tmp_path):
    r = run_cli("--resume", str(tmp_path / "nope.jsonl"))
    assert r.returncode != 0
    err = r.stderr.decode()
    assert err.startswith("tokenstep: cannot read the session file") and "Traceback" not in err
    assert err.count("\n") == 1


def test_resume_of_a_damaged_file_is_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    for content in (
        b"this is not json\n",
        b"\xff\xfe\x00garbage\n",
        json.dumps({"tokenstep_session": 1, "conversation": "x"}).encode() + b"\n",
        json.dumps({"hello": 1}).encode() + b"\n",
        b"",
    ):
        bad.write_bytes(content)
        r = run_cli("--resume", str(bad))
        err = r.stderr.decode()
        assert r.returncode != 0, content
        assert err.startswith("tokenstep: ") and "Traceback" not in err, err
        assert err.count("\n") == 1, err
