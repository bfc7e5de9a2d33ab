"""A scripted stand-in for llama-server, for replies no real server can be made to send.

The standard library's threaded http.server on 127.0.0.1 answers in llama-server's own shapes
(tools/server/server-context.cpp: /props, /v1/models, /tokenize with_pieces, /completion's
completion_probabilities); a test breaks one field with a mutation, or makes one path trickle
one byte a second (it stops by itself after a minute)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.cli import ROOT

N_VOCAB = 256  # ids are bytes: the scripted /tokenize maps each byte to its own id
N_CTX = 512
TOP = [(ord(c), math.log(p)) for c, p in zip("etaoi", (0.4, 0.3, 0.1, 0.05, 0.05), strict=True)]

Mutation = Callable[[Any], Any]


def _piece(tok: int) -> str | list[int]:
    return chr(tok) if tok < 128 else [tok]  # llama-server's form for bytes that are not UTF-8


def good_reply(path: str, req: dict[str, Any]) -> Any:
    """What llama-server answers, trimmed to the fields it always sends."""
    if path == "/health":
        return {"status": "ok"}
    if path == "/props":
        return {
            "default_generation_settings": {"n_ctx": N_CTX, "params": {"n_probs": 0}},
            "total_slots": 1,
            "model_alias": "scripted",
            "model_ftype": "F32",
            "model_path": "/models/scripted.gguf",
            "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}",
            "bos_token": "",
            "eos_token": "",
        }
    if path == "/v1/models":
        meta = {"vocab_type": 2, "n_vocab": N_VOCAB, "n_ctx": N_CTX, "n_ctx_train": 2048}
        meta.update({"n_embd": 64, "n_params": 1000, "size": 4000, "ftype": "F32"})
        return {"object": "list", "data": [{"id": "scripted", "object": "model", "meta": meta}]}
    if path == "/tokenize":
        data = str(req.get("content", "")).encode("utf-8", "surrogatepass")
        return {"tokens": [{"id": b, "piece": _piece(b)} for b in data]}
    if path == "/detokenize":
        return {"content": bytes(req.get("tokens", [])).decode("utf-8", "replace")}
    if path == "/slots":
        return [{"id": 0, "is_processing": False}]
    if path == "/completion":
        k = min(int(req.get("n_probs", 1)), len(TOP))
        top = [{"id": t, "token": chr(t), "bytes": [t], "logprob": lp} for t, lp in TOP[:k]]
        n = len(req.get("prompt", []))
        return {
            "content": chr(TOP[0][0]),
            "tokens": [TOP[0][0]],
            "id_slot": 0,
            "stop": True,
            "tokens_cached": n,
            "timings": {"cache_n": 0, "prompt_n": n, "prompt_ms": 1.0, "predicted_ms": 0.001},
            "completion_probabilities": [
                {
                    "id": TOP[0][0],
                    "token": chr(TOP[0][0]),
                    "bytes": [TOP[0][0]],
                    "logprob": TOP[0][1],
                    "top_logprobs": top,
                }
            ],
        }
    return None


class Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mutations: dict[str, Mutation] = {}
        self.trickle: str | None = None  # a path answered one byte a second
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Scripted
    protocol_version = "HTTP/1.1"  # keep-alive, as llama-server (cpp-httplib) speaks
    # TCP_NODELAY, as cpp-httplib sets it: http.server sends the headers and the body in two
    # writes, and with Nagle on the body waited for the client's delayed ACK of the headers,
    # 40 ms a request (49 ms a /completion here, 2.4 ms with it off).
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer({})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self._answer(json.loads(self.rfile.read(n) or b"{}"))

    def _answer(self, req: dict[str, Any]) -> None:
        path = self.path
        if self.server.trickle == path:
            return self._trickle()
        body = good_reply(path, req)
        if body is None:
            return self._send(404, b'{"error": {"code": 404, "message": "File Not Found"}}')
        mutate = self.server.mutations.get(path)
        if mutate is not None:
            body = mutate(body)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._send(200, raw)

    def _send(self, status: int, raw: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        try:
            self.wfile.write(raw)
        except OSError:  # the client refused a reply past its cap and closed the connection
            self.close_connection = True

    def _trickle(self) -> None:
        """Status, headers, then one byte a second of a long body; it stops by itself after
        60 bytes (or when the test ends), so a client that waits for it waits a minute."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.flush()
        for _ in range(60):
            if self.server.stop.wait(1.0):
                break
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                break
        self.close_connection = True


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    server = Scripted()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(30)


# ``python -m tui`` that writes its own peak RSS (VmHWM) to a file as it exits. Linux's rusage
# for a child starts from the parent's high-water mark at fork, so it would count pytest's.
LAUNCH = """
import os, runpy, sys
sys.argv[0] = "tokenstep"
try:
    runpy.run_module("tui", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as fh, open(os.environ["TOKENSTEP_TEST_HWM"], "w") as out:
        out.write(next(line for line in fh if line.startswith("VmHWM:")).split()[1])
"""


def run_measured(*args: str, timeout: float = 120) -> tuple[int, str, float, float]:
    """``python -m tui ARGS``: exit code, stderr, seconds and the process's own peak RSS in MB
    (0 when it was killed at ``timeout``)."""
    with tempfile.TemporaryDirectory() as tmp:
        hwm = os.path.join(tmp, "hwm")
        env = {**os.environ, "PYTHONIOENCODING": "utf-8", "TOKENSTEP_TEST_HWM": hwm}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        try:
            _out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
        seconds = time.monotonic() - t0
        mb = int(open(hwm).read()) / 1024 if os.path.exists(hwm) else 0.0
        return proc.returncode, err.decode(), seconds, mb


def one_sentence(server: Scripted, *extra: str) -> tuple[str, float, float]:
    """``trace`` against ``server``: a non-zero exit and exactly one sentence, no traceback and
    no warning; returns it with the seconds and peak MB."""
    code, err, seconds, mb = run_measured(
        "trace", "--server", server.url, "-p", "Hi", "-n", "2", "--timeout", "5", *extra
    )
    assert code == 1, err
    assert "Traceback" not in err and "Warning" not in err, err
    assert err.startswith("tokenstep: ") and err.count("\n") == 1, err
    return err, seconds, mb
