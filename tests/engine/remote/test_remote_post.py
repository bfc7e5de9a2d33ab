"""llama-server's own post-chain probabilities (``post_sampling_probs``) beside tokenstep's chain
on the same top K, against a real llama-server: where the survivors lie inside the top K the
two chains agree to float32 rounding; where they cannot, the note says why."""

from __future__ import annotations

import json

from tests.support.cli import run_cli
from tests.support.llama_server import llama_server  # noqa: F401  (the session fixture)
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend


def _row(url: str, settings: SamplerSettings, n_probs: int, text: str):
    b = RemoteBackend(url, settings, n_probs=n_probs, check_chain=True)
    try:
        b.prefill(b.vocab.tokenize(text, add_special=True))
        sampled = b.sample()
        return b.records[b.logits_record].server, sampled.chain
    finally:
        b.close()


def test_the_two_chains_agree_where_the_survivors_lie_inside_the_top_k(llama_server):  # noqa: F811
    s = SamplerSettings(temp=0.8, top_k=40, top_p=0.9, min_p=0.05, seed=5)
    for text in ("The capital of France is", "Once upon a time"):
        step, ours = _row(llama_server.url, s, 40, text)
        assert step.post_note.startswith("the server's chain agrees"), step.post_note
        mine = {int(t): float(p) for t, p in zip(ours.final_ids, ours.final_p, strict=True) if p}
        assert {t for t, _ in step.post_chain} == set(mine)
        for t, p in step.post_chain:
            assert abs(p - mine[t]) < 1e-3


def test_where_they_cannot_agree_the_note_says_why(llama_server):  # noqa: F811
    """No cut at all (top-k, top-p, min-p off): every token survives on the server, which lists
    only its top 5; tokenstep's chain ran on the top 5 and an even spread."""
    s = SamplerSettings(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)
    step, _ = _row(llama_server.url, s, 5, "Once upon a time")
    assert step.post_note.startswith("the server's chain differs"), step.post_note
    assert "lists only its top 5 survivors" in step.post_note


def test_trace_writes_the_server_chain_beside_ours(llama_server):  # noqa: F811
    out = run_cli(
        "trace", "--server", llama_server.url, "--server-chain-check", "-p", "The cat sat",
        "-n", "2", "--temp", "0.7", "--top-k", "20",
    )
    assert out.returncode == 0, out.stderr.decode()
    rows = [json.loads(line) for line in out.stdout.decode().splitlines()]
    checked = [r["server"]["server_chain"] for r in rows if "server_chain" in r.get("server", {})]
    assert checked and all(c["note"].startswith("the server's chain agrees") for c in checked)
    err = run_cli("trace", "--server", llama_server.url, "--api", "openai", "--server-chain-check",
                  "-p", "x")
    assert err.returncode == 1 and b"/v1/completions has none" in err.stderr
