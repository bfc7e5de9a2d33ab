"""Benchmark 12: stepping a model over llama-server, one request per token, against the server's
own speed in the same run (one ``/completion`` that streams the same number of tokens itself).

Where a remote step's time goes: the server evaluating the new token (``timings.prompt_ms``),
JSON (encoding the request and decoding the answer, measured here), tokenstep's own part (the
full-vocabulary row and the sampler chain) and the rest of the round trip (HTTP, the socket,
the server's queue and its response building). The same split for the same server's
OpenAI-compatible ``/v1/completions`` (``OpenAIBackend``, ``logprobs`` 100), in the same rounds.
Skipped, with a note, without the binary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tui.engine import SamplerSettings, default_model_path
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.remote.remote import RemoteBackend
from tui.engine.run import loop

from .common import TEXT, Row, median

N_TOKENS = 64


def server_binary() -> Path | None:
    env = os.environ.get("TOKENSTEP_LLAMA_SERVER")
    path = Path(env) if env else Path(sys.prefix) / "llama-server" / "bin" / "llama-server"
    return path if path.is_file() else None


def start_server(
    binary: Path,
    log: Path,
    *,
    parallel: int = 1,
    n_ctx: int = 4096,
    threads: int = 1,
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    args = [str(binary), "-m", str(default_model_path()), "--host", "127.0.0.1"]
    args += ["--port", str(port), "-c", str(n_ctx), "-np", str(parallel)]
    args += ["-t", str(threads)]  # 1: as the app decodes
    args += ["-fa", "off", "--no-webui"]
    # --no-repack where the server has AMX kernels
    from tests.support.llama_server import repack_args

    args += [*repack_args(binary), *extra]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("llama-server did not start")


def _server_streaming(url: str, prompt: list[int]) -> float:
    """The server's own predicted ms per token for one completion of N_TOKENS."""
    body = {"prompt": prompt, "n_predict": N_TOKENS, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return float(json.loads(r.read())["timings"]["predicted_per_token_ms"])


def _remote_steps(url: str, prompt: list[int], api: str = "native") -> dict[str, float]:
    """Medians per step over the native /completion, or (``api`` "openai") over the same
    server's /v1/completions with the same K (100)."""
    r = (
        OpenAIBackend(url, SamplerSettings(temp=0.0), n_probs=100)
        if api == "openai"
        else RemoteBackend(url, SamplerSettings(temp=0.0))
    )
    try:
        r.sync_prompt(prompt, reuse=False)
        wall, server, json_ms, trip = [], [], [], []
        for _ in range(N_TOKENS):
            t0 = time.perf_counter()
            rec = loop.advance(r).record
            wall.append((time.perf_counter() - t0) * 1000.0)
            if rec is None or rec.server is None:
                break
            server.append(rec.server.prompt_ms + rec.server.predicted_ms)
            json_ms.append(rec.server.json_ms)
            trip.append(rec.server.round_trip_ms)
    finally:
        r.close()
    w, s, j, t = median(wall), median(server), median(json_ms), median(trip)
    return {"wall": w, "server": s, "json": j, "http": t - s - j, "client": w - t}


def run(rounds: int = 3) -> list[Row]:
    binary = server_binary()
    if binary is None:
        return [
            Row(
                "12. remote step",
                "skipped",
                "reported",
                None,
                "no llama-server binary (make llama-server builds it)",
            )
        ]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(binary, Path(tmp) / "server.log")
        try:
            r = RemoteBackend(url)
            prompt = r.vocab.tokenize(TEXT, add_special=False)
            r.close()
            stream, steps, v1 = [], [], []
            for _ in range(rounds):  # alternate, so all see the same machine load
                stream.append(_server_streaming(url, prompt))
                steps.append(_remote_steps(url, prompt))
                v1.append(_remote_steps(url, prompt, "openai"))
        finally:
            proc.terminate()
            proc.wait(30)
    s = {k: median([x[k] for x in steps]) for k in steps[0]}
    o = {k: median([x[k] for x in v1]) for k in v1[0]}
    own = median(stream)
    return [
        Row(
            "12. remote step",
            f"{s['wall']:.1f} ms/token",
            "reported",
            None,
            f"server streaming itself: {own:.1f} ms/token ({s['wall'] / own:.1f}x); per step: "
            f"server eval {s['server']:.1f} ms, HTTP+queue {s['http']:.1f} ms, JSON "
            f"{s['json']:.1f} ms, tokenstep row+chain {s['client']:.1f} ms "
            f"(n_probs 100, {N_TOKENS} tokens, medians of {rounds})",
        ),
        Row(
            "12. remote step over /v1",
            f"{o['wall']:.1f} ms/token",
            "reported",
            None,
            f"the same server's /v1/completions (logprobs 100): {o['wall'] / s['wall']:.2f}x the "
            f"native step; per step: server eval {o['server']:.1f} ms, HTTP+queue "
            f"{o['http']:.1f} ms, JSON {o['json']:.1f} ms, tokenstep row+chain "
            f"{o['client']:.1f} ms",
        ),
    ]
