"""`tokenstep trace --attention / --graph / --profile`, run as a user would."""

from __future__ import annotations

import json

import numpy as np

from tests.support.cli import run_cli


def _lines(out: bytes) -> list[dict]:
    return [json.loads(line) for line in out.decode().splitlines()]


def test_trace_attention_layer_adds_weights_per_step():
    r = run_cli("trace", "-p", "The cat sat on the mat.", "-n", "3", "--temp", "0",
                "--attention", "3", "-t", "2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    steps = _lines(r.stdout)
    assert len(steps) == 3
    for d in steps:
        assert d["flash_attn"] == "off"
        assert list(d["attention"]) == ["3"]
        w = np.array(d["attention"]["3"])
        n_q, n_k = len(d["batch"]), d["kv"]["used"]
        assert w.shape == (9, n_q, n_k)
        assert d["attention_keys"]["pos"] == list(range(n_k))
        np.testing.assert_allclose(w.sum(axis=2), 1.0, atol=1e-3)  # rounded to 4 decimals
        assert w.round(4).tolist() == d["attention"]["3"]
        q_pos = np.array([t["pos"] for t in d["batch"]])
        assert np.all(w[:, np.arange(n_k)[None, :] > q_pos[:, None]] == 0.0)
    assert "graph" not in steps[0] and "profile" not in steps[0]


def test_trace_attention_all_and_graph_census():
    r = run_cli("trace", "-p", "Hi there", "-n", "1", "--temp", "0", "--attention", "all",
                "--graph", "-t", "2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (d,) = _lines(r.stdout)
    assert sorted(d["attention"], key=int) == [str(i) for i in range(30)]
    g = d["graph"]
    assert g["n_nodes"] > 900 and "kq_soft_max" in g["layer_chain"]
    assert g["epilogue"][-1] == "result_output:MUL_MAT"


def test_trace_graph_alone_keeps_flash_attention_and_profile_is_marked():
    r = run_cli("trace", "-p", "Hi", "-n", "1", "--graph", "--profile", "-fa", "on", "-t", "2")
    assert r.returncode == 0, r.stderr
    (d,) = _lines(r.stdout)
    assert d["flash_attn"] == "on"
    assert "kq_soft_max" not in d["graph"]["layer_chain"]
    assert "attention" not in d
    assert "slower" in d["profile"]["note"] and len(d["profile"]["attention_ms"]) == 30


def test_trace_attention_bad_layers_are_one_sentence():
    for args, needle in (
        (["--attention", "999"], "out of range: this model has 30 layers (0 to 29)"),
        (["--attention", "-1"], "out of range"),
        (["--attention", "two"], "a layer number, a comma list or 'all'"),
        (["--attention", "3", "-fa", "on"], "needs flash attention off"),
        (["--attention", "3", "-ctv", "q8_0"], "use -ctv f16"),
    ):
        r = run_cli("trace", "-p", "Hi", "-n", "1", *args)
        assert r.returncode != 0, args
        err = r.stderr.decode()
        assert needle in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert r.stdout == b""
