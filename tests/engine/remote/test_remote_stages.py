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

from tests.support.cli import ROOT, run_cli
from tests.support.llama_server import llama_server  # noqa: F401  (the session fixture)
from tests.support.swa_model import write_swa_model
from tui.engine import default_model_path

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
    """Each pick the trace calls exact is the local engine's (greedy: the same argmax)."""
    model = str(default_model_path())
    spaced = 'root ::= (" yes" | " no" | "yes" | "no") "."?'  # " n" is in the top 100
    for flags in (
        ("--dry-multiplier", "1", "--dry-allowed-length", "1"),
        ("-j", SCHEMA),
        ("--grammar", spaced),
    ):
        local = _ids(run_cli("trace", *BASE, "-fa", "off", *flags))
        remote = run_cli("trace", "--server", llama_server.url, "-m", model, *BASE, *flags)
        got = _ids(remote)
        assert len(got) == len(local), flags
        recs = [json.loads(line) for line in remote.stdout.decode().splitlines()]
        n_exact = next((i for i, r in enumerate(recs) if not r["server"]["pick_exact"]), len(recs))
        assert n_exact >= 1 and got[:n_exact] == local[:n_exact], (flags, got, local)
    # "yes" and "no" lie outside the top 100 after "Hello": every pick is called what it is,
    # and the grammar's end is llama.cpp's own end of generation (the local vocabulary's)
    remote = run_cli(
        "trace", "--server", llama_server.url, "-m", model, *BASE, "--grammar", GRAMMAR
    )
    recs = [json.loads(line) for line in remote.stdout.decode().splitlines()]
    text = "".join(r["sampled"]["piece"] for r in recs[:-1])
    assert text in ("yes", "no") and recs[-1]["eog"] is True, recs
    for r in recs:
        assert r["server"]["pick_exact"] is False
        assert "outside the server's top 100" in r["server"]["pick_note"]


def test_a_gguf_with_another_vocabulary_is_one_sentence(llama_server, tmp_path):  # noqa: F811
    other = write_swa_model(tmp_path / "other.gguf")
    args = ("trace", "--server", llama_server.url, "-m", str(other), *BASE, "--grammar", GRAMMAR)
    err = _one_sentence(run_cli(*args))
    assert f"-m {other} is not the model llama-server at {llama_server.url} serves" in err
    assert "259 tokens and the server's 49,152" in err
    err = _one_sentence(
        run_cli("trace", "--server", llama_server.url, "-m", str(tmp_path / "no"), "-p", "x")
    )
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
from tui.engine.remote.remote import RemoteBackend
from tests.support.app import SIZE, send, wait_for

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
        await pilot.press("L")  # the lens key: the sentence --lens gets in trace
        await wait_for(pilot, lambda: "The logit lens needs" in app.view.notice, "the lens refusal")
        out["lens"] = app.view.notice
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
    assert (
        out["lens"]
        == f"The logit lens needs a local model: this one runs on the server at {llama_server.url}."
    )


CHAIN_SCRIPT = r"""
import numpy as np
from tui.engine.model.errors import TokenstepError
from tui.engine.sampler.sampling import SamplerChain, SamplerSettings
chain = SamplerChain(1000)  # no vocabulary
for s in (SamplerSettings(dry_multiplier=1.0), SamplerSettings(grammar='root ::= "a"')):
    try:
        chain.run(np.zeros(1000, dtype=np.float32), s, commit=True, history=[1, 2, 1, 2])
    except TokenstepError as exc:
        print(exc)
"""


def test_a_chain_without_a_vocabulary_refuses_dry_and_grammars_instead_of_ending_the_process():
    """In a child process: before, llama.cpp's DRY segfaulted (139) and its grammar aborted."""
    proc = subprocess.run(
        [sys.executable, "-c", CHAIN_SCRIPT], capture_output=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode()[-2000:])
    said = proc.stdout.decode().splitlines()
    assert said == [
        "DRY (--dry-multiplier) needs llama.cpp's vocabulary (the text of each token), and "
        "this chain has none.",
        "a grammar (--grammar, -j/--json-schema) needs llama.cpp's vocabulary (the text of "
        "each token), and this chain has none.",
    ]


def test_a_pick_is_called_exact_only_when_no_stage_reached_past_the_top_k():
    import numpy as np

    from tui.engine.remote.remote_chain import pick_exactness
    from tui.engine.sampler.sampling import SamplerChain, SamplerSettings
    from tui.engine.wire.remote_step import fill_row

    rng = np.random.default_rng(0)
    n_vocab, ids = 2000, list(range(100))
    logits = np.sort(rng.normal(0, 3, n_vocab))[::-1].astype(np.float64)
    lp = logits[:100] - np.log(np.exp(logits).sum())
    row, _ = fill_row(ids, lp.tolist(), n_vocab)
    chain = SamplerChain(n_vocab)
    try:
        plain = chain.run(row, SamplerSettings(seed=1), commit=False)
        assert pick_exactness(SamplerSettings(seed=1), ids, plain, plain.selected) is None
        for s, why in (
            (SamplerSettings(top_n_sigma=1.0), "top-n-σ"),
            (SamplerSettings(top_k=0, typical_p=0.5), "typical"),
            (SamplerSettings(top_k=0, top_p=1.0, min_p=0.0), "outside the server's top 100"),
            (SamplerSettings(repeat_penalty=1.3), "repeat penalty"),
            (SamplerSettings(mirostat=2, temp=1.5), "the temperature rescaled the stand-ins"),
        ):
            res = chain.run(row, s, commit=False, history=[0, 1, 2])
            note = pick_exactness(s, ids, res, res.selected)
            assert note is not None and why in note, (s, note)
    finally:
        chain.free()


def test_with_the_served_vocabulary_the_apps_dialog_sets_dry_and_a_grammar(
    llama_server,  # noqa: F811
    tmp_path,
):
    from tests.support.worker import wait
    from tui.engine import SamplerSettings
    from tui.engine.model.local_vocab import LocalVocab
    from tui.engine.remote.remote import RemoteBackend
    from tui.worker import Worker

    local = LocalVocab(default_model_path())
    backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0), local_vocab=local)
    assert backend.capabilities.vocab is True
    w = Worker(backend, autoplay=False, autosave_dir=tmp_path / "autosave")
    w.start()
    try:
        w.send("Say yes or no.")
        v = wait(w, lambda v: v.activity == "generating", "the prefill")
        n0 = len(v.text.tokens)
        w.chain_edit("set", "dry-multiplier 1")
        v = wait(w, lambda v: v.settings.dry_multiplier == 1.0, "DRY on")
        assert "dry" in [st.key for st in v.logits.chain.stages]
        w.chain_edit("set", 'grammar root ::= (" yes" | " no" | "yes" | "no" | "Yes" | "No") "."?')
        v = wait(w, lambda v: v.settings.grammar != "", "the grammar")
        for _ in range(2):
            w.step()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 2 or v.notice_level == "error", "steps")
        assert v.notice_level != "error", v.notice
        reply = backend.vocab.text(list(v.text.tokens[n0:])).strip(" .").lower()
        assert reply in ("yes", "no"), reply
    finally:
        assert w.stop()
    assert w.error is None, w.error


def test_the_servers_own_pick_runs_the_whole_chain(llama_server):  # noqa: F811
    """``--pick server`` sent the server only top-k, top-p, min-p and temperature, so its pick
    ignored a repeat penalty (and DRY, grammars, mirostat) without a word: on this repetitive
    prompt it repeated ' sat on the mat. The' while the local engine, penalised, did not. Now
    the server gets every stage's field and, greedy, picks what the local engine picks."""
    prompt = "The cat sat on the mat. The cat sat on the mat. The cat"
    flags = ("-p", prompt, "-n", "8", "-t", "1", "--temp", "0", "--repeat-penalty", "1.5")
    local = _ids(run_cli("trace", "-fa", "off", "-c", "4096", *flags))
    served = _ids(
        run_cli("trace", "--server", llama_server.url, "--slot", "1", "--pick", "server", *flags)
    )
    assert served == local, (served, local)
    plain = _ids(run_cli("trace", "-fa", "off", "-c", "4096", *flags[:-2]))
    assert plain != local  # the penalty changes this text: the check could fail


def test_the_servers_own_pick_refuses_a_grammar_in_one_sentence(llama_server):  # noqa: F811
    """llama-server starts a grammar afresh at every one-token request, so its pick cannot
    follow one: refused before anything runs, naming the pick that can."""
    model = str(default_model_path())
    err = _one_sentence(
        run_cli(
            "trace",
            "--server",
            llama_server.url,
            "-m",
            model,
            "--pick",
            "server",
            *BASE,
            "--grammar",
            GRAMMAR,
        )
    )
    assert "--pick server cannot follow a grammar" in err and "--pick tokenstep" in err
