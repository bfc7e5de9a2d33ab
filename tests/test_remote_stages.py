"""The sampler stages that read the vocabulary's text (DRY, grammars, JSON schemas) and the
observer flags, over a REAL llama-server, each in a real process.

llama-server sends ids and logprobs, never a ``llama_vocab``. llama.cpp's DRY with a NULL
vocabulary segfaulted the process (exit 139) and its grammar aborted it (134,
``GGML_ASSERT(grammar.vocab != nullptr)``), in ``trace`` and in the app's ``:`` dialog. Now
they are one sentence naming ``-m``, or, with ``-m`` the GGUF the server serves, they run on its
vocabulary (loaded alone) and give the local engine's tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tui.engine import default_model_path

from .conftest import ROOT, run_cli
from .llama_server import llama_server  # noqa: F401  (the session fixture)
from .swa_model import write_swa_model

GRAMMAR = 'root ::= "yes" | "no"'
SCHEMA = '{"type":"string"}'
BASE = ("-p", "Hello", "-n", "3", "-c", "256", "-t", "1", "--temp", "0")


def _one_sentence(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "GGML_ASSERT" not in err
    assert err.count("\n") == 1 and err.startswith("tokenstep: "), err
    return err


def _ids(proc: subprocess.CompletedProcess) -> list[int]:
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode()[-2000:])
    recs = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    return [r["sampled"]["id"] for r in recs if r.get("sampled")]


def test_dry_grammar_and_schema_over_a_server_without_a_vocabulary_are_one_sentence(
    llama_server,  # noqa: F811
):
    for flags in (("--dry-multiplier", "1"), ("--grammar", GRAMMAR), ("-j", SCHEMA)):
        err = _one_sentence(run_cli("trace", "--server", llama_server.url, *BASE, *flags))
        assert "needs llama.cpp's vocabulary" in err, err
        assert f"the server at {llama_server.url} sends none" in err
        assert "-m PATH" in err  # the flag that makes it work


def test_dry_and_grammars_run_on_the_served_ggufs_vocabulary_and_match_the_local_engine(
    llama_server,  # noqa: F811
):
    model = str(default_model_path())
    for flags in (
        ("--dry-multiplier", "1", "--dry-allowed-length", "1"),
        ("--grammar", GRAMMAR),
        ("-j", SCHEMA),
    ):
        local = _ids(run_cli("trace", *BASE, "-fa", "off", *flags))
        remote = run_cli("trace", "--server", llama_server.url, "-m", model, *BASE, *flags)
        assert _ids(remote) == local, flags
    yes_no = _ids(
        run_cli("trace", "--server", llama_server.url, "-m", model, *BASE, "--grammar", GRAMMAR)
    )
    assert len(yes_no) >= 1  # the grammar's text: "yes" or "no", then end of generation


def test_a_gguf_with_another_vocabulary_is_one_sentence(llama_server, tmp_path):  # noqa: F811
    other = write_swa_model(tmp_path / "other.gguf")
    args = ("trace", "--server", llama_server.url, "-m", str(other), *BASE, "--grammar", GRAMMAR)
    err = _one_sentence(run_cli(*args))
    assert f"-m {other} is not the model llama-server at {llama_server.url} serves" in err
    assert "259 tokens and the server's 49,152" in err
    err = _one_sentence(run_cli("trace", "--server", llama_server.url, "-m", str(tmp_path / "no")))
    assert str(tmp_path / "no") in err


def test_every_observer_flag_with_server_is_refused_in_the_same_words():
    url = "http://127.0.0.1:1"  # refused before connecting: nothing needs to listen
    for flag in (("--attention", "0"), ("--lens",), ("--graph",), ("--profile",)):
        err = _one_sentence(run_cli("trace", "--server", url, *flag, "-p", "x"))
        assert f"{flag[0]} needs a local model: this one runs on the server at {url}." in err


APP_SCRIPT = r"""
import asyncio, json, sys
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote import RemoteBackend
from tests.test_app import SIZE, send, wait_for

async def main(url, autosave):
    backend = RemoteBackend(url, SamplerSettings(temp=0.0), n_probs=20)
    app = TokenstepApp(backend, autosave_dir=autosave, autoplay=False)
    out = {}
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say yes or no.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        tokens = app.view.text.tokens
        for line in ("dry-multiplier 1", 'grammar root ::= "yes" | "no"',
                     'json-schema {"type":"string"}'):
            await pilot.press("colon")
            await pilot.pause()
            app.screen.query_one("#chain-set").value = line
            await pilot.press("enter")
            await wait_for(pilot, lambda: "vocabulary" in app.view.notice, line)
            out[line] = app.view.notice
            assert app.view.text.tokens == tokens, "the conversation changed"
        s = app.view.settings
        out["settings"] = [s.dry_multiplier, s.grammar]
        for key in ("t", "T", "k", "K", "p", "P", "m", "M", "g", "g", "right"):
            await pilot.press(key)  # the sampler keys after a refusal: the chain still runs
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "a step after")
        out["kept"] = app.view.text.tokens[: len(tokens)] == tokens
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_the_apps_chain_dialog_refuses_dry_and_grammars_over_a_server_and_keeps_the_chat(
    llama_server,  # noqa: F811
    tmp_path,
):
    proc = subprocess.run(
        [sys.executable, "-c", APP_SCRIPT, llama_server.url, str(tmp_path / "autosave")],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode()[-3000:])
    out = json.loads(proc.stdout.decode().splitlines()[-1])
    for line in ("dry-multiplier 1", 'grammar root ::= "yes" | "no"'):
        assert "needs llama.cpp's vocabulary" in out[line] and "-m PATH" in out[line], out[line]
    assert "needs llama.cpp's vocabulary" in out['json-schema {"type":"string"}']
    assert out["settings"] == [0.0, ""]  # nothing changed
    assert out["kept"] is True
