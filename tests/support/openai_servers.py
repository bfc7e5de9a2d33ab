"""Servers for the OpenAI-compatible backend's tests.

* llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``, its
  ``[server]`` extra): an implementation independent of llama-server, which takes text prompts
  only and answers in OpenAI's legacy ``tokens``/``top_logprobs`` form.
* A scripted stand-in for the replies no real server can be made to send (a 401, a 429 with
  ``Retry-After``, a reply without logprobs, several models, one that never answers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ROOT
from tests.support.llama_server import Server, free_port, wait_healthy
from tests.support.oracle_params import SERVER_BOOT
from tests.support.processes import track
from tui.engine import default_model_path


def start_llama_cpp_server(log_dir: Path) -> Server:
    """``python -m llama_cpp.server`` on the bundled model, loaded as tokenstep loads (no
    extra buffers on an AMX build); polls /v1/models until it answers."""
    pytest.importorskip("uvicorn", reason="llama-cpp-python's [server] extra is not installed")
    port = free_port()
    log = log_dir / f"llama-cpp-server-{port}.log"
    args = [sys.executable, "-c", SERVER_BOOT, "--model", str(default_model_path())]
    args += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    server = Server(track(proc, f"llama_cpp.server on port {port}"), port, log)
    wait_healthy(server, path="/v1/models", name="llama_cpp.server")
    return server


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Stopped when the module is done (each importing module has its own copy)."""
    server = start_llama_cpp_server(tmp_path_factory.mktemp("llama-cpp-server"))
    try:
        yield server
    finally:
        server.stop()


# The fake's candidates: ids of SmolLM2's vocabulary (" Paris", ".", " the"), in llama-server's
# /v1 form (ids and bytes), so the fake needs no tokenizer of its own (tests pass -m).
TOP = [(7042, " Paris", -0.3), (30, ".", -1.6), (260, " the", -2.9)]


class Fake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.models = ["fake-model"]
        self.status: int | None = None  # answer /v1/completions with this status
        self.get_status: int | None = None  # answer every GET with this status
        self.headers_out: dict[str, str] = {}
        self.no_logprobs = False
        self.hang = threading.Event()  # set: /v1/completions never answers (until released)
        self.release = threading.Event()
        self.seen_auth: list[str | None] = []
        self.completions = 0
        # With ``status``: the error message, "{auth}" replaced by the request's Authorization
        # header (a server that echoes what it was sent; no real one can be made to).
        self.echo: str | None = None
        self.mutate: Any = None  # a function applied to each 200 reply of /v1/completions

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeHandler(BaseHTTPRequestHandler):
    server: Fake
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes (scripted_server.py)

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen_auth.append(self.headers.get("Authorization"))
        if self.server.get_status is not None:
            body = {"error": {"message": "Incorrect API key provided"}}
            return self._send(self.server.get_status, body)
        if self.path == "/v1/models":
            data = [{"id": m, "object": "model"} for m in self.server.models]
            return self._send(200, {"object": "list", "data": data})
        self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        self.server.seen_auth.append(self.headers.get("Authorization"))
        if self.path != "/v1/completions":
            return self._send(404, {"detail": "Not Found"})
        if self.server.hang.is_set():
            self.server.release.wait(120)
            return self._send(200, {})
        if self.server.status is not None:
            msg = {401: "Incorrect API key provided", 429: "Rate limit reached"}
            text = msg.get(self.server.status, "no")
            if self.server.echo is not None:
                auth = self.headers.get("Authorization") or ""
                text = self.server.echo.replace("{auth}", auth)
            body = {"error": {"message": text}}
            return self._send(self.server.status, body, self.server.headers_out)
        self.server.completions += 1
        k = int(req.get("logprobs") or 0)
        top = [
            {"id": t, "token": s, "bytes": list(s.encode()), "logprob": lp} for t, s, lp in TOP[:k]
        ]
        first = {"id": TOP[0][0], "token": TOP[0][1], "logprob": TOP[0][2], "top_logprobs": top}
        choice: dict[str, Any] = {"text": TOP[0][1], "index": 0, "finish_reason": "length"}
        choice["logprobs"] = None if self.server.no_logprobs else {"content": [first]}
        reply: dict[str, Any] = {"object": "text_completion", "choices": [choice]}
        if self.server.mutate is not None:
            reply = self.server.mutate(reply)
        self._send(200, reply)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def fake() -> Iterator[Fake]:
    server = Fake()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(30)
