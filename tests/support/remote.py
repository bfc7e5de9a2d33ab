"""Shared pieces of the OpenAI-backend tests: prompts, keys, distributions, errors."""

from __future__ import annotations

import math
import subprocess

import numpy as np

from tui.app import TokenstepApp
from tui.engine.remote.remote import RemoteBackend
from tui.engine.sampler.sampling import softmax


def remote_screen_text(app: TokenstepApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.walk_children()) + app.export_screenshot()


KEY = "sk-test-0123456789-SECRET"


PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "1, 2, 3, 4,"]


def _server_logprobs(r: RemoteBackend) -> dict[int, float]:
    rec = r.records[r.logits_record]
    return dict(zip(rec.server.top_ids, rec.server.top_logprobs, strict=True))


def compare_distributions(eng, r: RemoteBackend) -> None:
    """The server's top K against the local logits row: logprob differences are logit
    differences (to 1e-4), and the probabilities agree."""
    lp = _server_logprobs(r)
    logits = eng.logits.astype(np.float64)
    p = softmax(eng.logits)
    ids = list(lp)
    assert ids == sorted(ids, key=lambda t: -logits[t])[: len(ids)] or (
        # a tie at the cut may order two equal logits differently
        set(ids[:-1]) <= set(np.argsort(-logits)[: len(ids) + 1].tolist())
    )
    best = ids[0]
    for t in ids:
        assert abs((lp[t] - lp[best]) - (logits[t] - logits[best])) < 1e-4
    # llama-server normalises with a float32 running sum over the vocabulary, which puts one
    # shared factor (measured here: 1 + 1.7e-4) on all its probabilities; the rest agrees.
    ratio = np.array([math.exp(lp[t]) / p[t] for t in ids])
    assert np.ptp(ratio) < 1e-4
    assert abs(ratio[0] - 1.0) < 1e-3
    assert max(abs(math.exp(lp[t]) - p[t]) for t in ids) < 1e-4 + 1e-3 * max(p[ids])


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("tokenstep: ")
    return err
