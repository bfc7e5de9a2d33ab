"""A real llama-server process for the remote-backend tests.

The binary is llama.cpp's own server, built from the llama.cpp that llama-cpp-python vendors
(``scripts/build_llama_server.sh``; ``make test`` builds it once into ``.venv/llama-server``).
Tests find it through ``TOKENSTEP_LLAMA_SERVER`` or next to the running interpreter's venv.
Without it the tests skip with the reason printed, except in CI (``CI`` set), where a missing
binary is a failure.

On a CPU with AMX (every Xeon since Sapphire Rapids) a natively built llama-server segfaults on
its first completion unless started with ``--no-repack`` (llama.cpp #20824). The flag is chosen
from the binary's own system info (:func:`server_system_info`) with tokenstep's rule
(:func:`tui.engine.model.repack.decide`); a server whose load log still names an AMX buffer is
started again with it.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import track
from tui.engine import default_model_path
from tui.engine.model import repack

START_TIMEOUT_S = 180.0  # a loaded 2-core machine; the bundled model loads in under a second idle


def server_binary() -> Path | None:
    env = os.environ.get("TOKENSTEP_LLAMA_SERVER")
    candidates = [Path(env)] if env else []
    candidates.append(Path(sys.prefix) / "llama-server" / "bin" / "llama-server")
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def require_binary() -> Path:
    path = server_binary()
    if path is not None:
        return path
    reason = (
        "no llama-server binary (build it with `make test`, or scripts/build_llama_server.sh, "
        "or set TOKENSTEP_LLAMA_SERVER)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason + "; CI must build it")
    print(f"\nskipping: {reason}", file=sys.stderr)
    pytest.skip(reason)


def _env(binary: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The binary finds its shared libraries beside it (the build's RPATH points elsewhere).
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(binary.parent), env.get("LD_LIBRARY_PATH", "")) if p
    )
    return env


@functools.cache
def server_system_info(binary: Path) -> str:
    """The binary's own "system_info: n_threads = ... | CPU : SSE3 = 1 | ..." line, or "" when
    it prints none. llama-server logs it at its trace verbosity (-lv 4) before it loads the
    model, so it is started on a model file that does not exist and ends right after."""
    missing = Path(tempfile.gettempdir()) / "tokenstep-no-such-model.gguf"
    args = [str(binary), "-lv", "4", "-m", str(missing), "--host", "127.0.0.1"]
    args += ["--port", str(free_port()), "--no-webui"]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(binary)
    )
    try:
        out, _ = proc.communicate(timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    for line in out.decode("utf-8", "replace").splitlines():
        if "system_info:" in line:
            return line[line.index("system_info:") :].strip()
    return ""


def repack_args(binary: Path) -> tuple[str, ...]:
    """("--no-repack",) where this build has AMX kernels, () elsewhere (its default). Asked of
    the llama-server beside ``binary``: llama-perplexity links the same ggml libraries but
    prints no system info before it loads (and takes none of the server's flags)."""
    server = binary.with_name("llama-server")
    choice = repack.decide(server_system_info(server if server.is_file() else binary))
    return () if choice.use_extra_bufts else ("--no-repack",)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


@dataclass
class Server:
    """One server process on 127.0.0.1 (llama-server, llama-cpp-python's, vLLM)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def start_server(
    log_dir: Path,
    *,
    port: int | None = None,
    extra: tuple[str, ...] = (),
    wait: bool = True,
    flash_attn: str = "off",
) -> Server:
    """Start llama-server with the bundled model (-fa off unless ``flash_attn`` says, 2 slots,
    no web UI) and, with ``wait``, poll ``/health`` until it answers 200. A test that compares
    logits or greedy text with a local engine starts both with the same flash-attention
    setting: without flash attention, CPUs without AVX-512 give a batch's rows logits that
    differ from one-row decodes by up to 0.6 here, enough to flip a near tie."""
    binary = require_binary()
    port = port or free_port()
    log = log_dir / f"llama-server-{port}-{time.monotonic_ns()}.log"
    args = [
        str(binary),
        "-m",
        str(default_model_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "4096",
        "-np",
        "2",
        "-t",
        "1",
        "-fa",
        flash_attn,
        "--no-webui",
        *repack_args(binary),
        *extra,
    ]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=_env(binary))
    server = Server(track(proc, f"llama-server on port {port}"), port, log)
    if wait:
        wait_healthy(server)
        chose = {"--repack", "--no-repack", "-nr"} & set(args)
        if not chose and repack.amx_buffer_mib(log.read_text(errors="replace").splitlines()):
            # No AMX in its system info, but its weights went to an AMX buffer: start again
            # without extra buffers before any completion runs on them.
            server.stop()
            return start_server(log_dir, port=port, extra=("--no-repack", *extra), wait=wait)
    return server


def wait_healthy(
    server: Server,
    timeout: float = START_TIMEOUT_S,
    *,
    path: str = "/health",
    name: str = "llama-server",
    poll: float = 0.05,
) -> float:
    """Poll ``path`` until the server answers 200 and return the seconds that took; a server
    that exits or does not answer in ``timeout`` is stopped and the test fails with its log's
    tail. Every test server (llama-server, llama-cpp-python's, vLLM) comes up through here."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if server.proc.poll() is not None:
            server.stop()
            raise AssertionError(f"{name} exited with {server.proc.returncode}:\n{server.tail()}")
        if http_status(server.url + path) == 200:
            return time.monotonic() - t0
        time.sleep(poll)  # polling interval only; the condition is the server's answer
    server.stop()
    raise AssertionError(f"{name} did not answer {path} within {timeout:.0f} s:\n{server.tail()}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the module's read-only tests (each test uses its own slot state),
    stopped when the module is done. Each module that imports this fixture has its own copy of
    it, so a session scope kept one server per module alive until the run ended."""
    server = start_server(tmp_path_factory.mktemp("llama-server"))
    try:
        yield server
    finally:
        server.stop()
