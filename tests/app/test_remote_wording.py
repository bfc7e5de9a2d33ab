"""What the screen says over a real llama-server after a rewind, a failed request and a restart:
each figure is what is known over HTTP (the top K, not n_vocab scores; the slot's cache, not KV
cells; a pick that was never sent), never the local engine's wording."""

from __future__ import annotations

from tests.support.app import SIZE, run_async, send, wait_for
from tests.support.llama_server import free_port, llama_server, start_server  # noqa: F401
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.widgets.pipeline import PipelinePane


def _facts(app: TokenstepApp) -> list[str]:
    assert app.view is not None
    return app.query_one(PipelinePane).facts(app.view)


@run_async
async def test_a_rewind_over_http_says_what_is_known(llama_server, tmp_path):  # noqa: F811
    backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0))
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        n0 = len(app.view.text.tokens)
        for i in range(3):
            await pilot.press("right")
            await wait_for(pilot, lambda i=i: len(app.view.text.tokens) == n0 + i + 1, "a step")
        held = backend.records[-1].server.tokens_cached  # the slot's own count after the last
        assert held >= n0 + 2
        await pilot.press("left")
        await wait_for(pilot, lambda: app.view.action == "rewind", "the rewind")
        v = app.view
        facts = _facts(app)
        n_vocab = backend.info.n_vocab
        assert f"{n_vocab:,} scores" not in " ".join(facts)  # only the top K crossed HTTP
        assert facts[3].startswith(f"top 100 of {n_vocab} kept from before (logprobs)")
        assert " · H ≤ " in facts[3]  # the even rest makes the entropy an upper bound
        assert "cells" not in facts[6] and "KV" not in facts[6]
        assert facts[6] == (
            f"rewound: nothing sent; → sends the {n0 + 2} kept ids and its pick "
            f"(the slot held {held})"
        )
        assert "KV cells" not in v.notice
        assert v.notice == (
            f"Rewound 1 token: nothing sent; → sends the {n0 + 2} kept ids and its pick (the "
            f"server's slot held {held} and reuses the common prefix); the top 100 logprobs for "
            "the new last token came from memory."
        )
        # → after the rewind: the server reuses its cache for all but the resent token
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.action == "step", "the step after the rewind")
        step = backend.records[-1].server
        assert step.prompt_tokens == n0 + 3 and step.cache_n >= n0 + 1 and not step.cache_lost


@run_async
async def test_a_failed_request_and_a_restarted_server_say_what_was_sent(tmp_path):
    port = free_port()
    server = start_server(tmp_path, port=port)
    backend = RemoteBackend(server.url, SamplerSettings(temp=0.0))
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Name a colour.")
            n0 = len(app.view.text.tokens)
            await pilot.press("right")
            await wait_for(pilot, lambda: len(app.view.text.tokens) == n0 + 1, "a step")
            server.stop()
            await pilot.press("right")
            await wait_for(pilot, lambda: app.view.notice_level == "error", "the error")
            facts = _facts(app)
            assert facts[1].startswith("not sent: ") and facts[6].startswith("not fed back: ")
            pick = backend.unsent_pick
            assert pick is not None and app.view.text.last_pick.id == pick
            assert f"(id {pick}) waits for the server; → sends it again" in facts[1]
            assert facts[1].startswith("not sent: ")
            assert facts[2] == "on the server: no answer to the last request; nothing changed here"
            assert facts[6].startswith(
                f"not fed back: → sends {n0 + 2} token ids, the {n0 + 1} kept and "
            )
            server = start_server(tmp_path, port=port)  # the same port, an empty cache
            await pilot.press("right")
            await wait_for(pilot, lambda: len(app.view.text.tokens) == n0 + 2, "the retry")
            step = backend.records[-1].server
            assert step.prompt_tokens == n0 + 2  # what row 7 said → would send
            assert app.view.text.tokens[-1] == pick  # the same pick, not a new draw
            assert step.cache_lost and step.cache_n == 0
            v = app.view
            assert v.notice_level == "warn"
            assert (
                "The server had lost its cache (restarted, or another client used slot 0): "
                f"it evaluated {step.prompt_n} of the {n0 + 2} tokens again, 0 from its cache."
            ) in v.notice
            facts = _facts(app)
            assert facts[2].startswith(
                f"on the server: {step.prompt_n} evaluated, 0 from its cache (lost) · server "
            )
            assert facts[6] == (
                f"fed back: the request sent all {n0 + 2} token ids; the server caches them"
            )
    finally:
        server.stop()
