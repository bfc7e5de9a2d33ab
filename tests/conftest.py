"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

# llama.cpp's OpenMP workers spin while they wait for work (GNU OpenMP's default). On a
# loaded 2-core machine (CI, or a suite beside other work) a spinning worker holds a core the
# thread it waits for needs, and a decode measured at 10 ms here took seconds. Passive waiting
# costs a little speed on a quiet machine and no figure: it must be set before llama.cpp's
# library loads, and llama-server processes the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A suite started as a background job of a non-interactive shell (`make test &`, a script's
# `cmd &`) inherits SIGINT ignored (POSIX), and so would every process it starts: tokenstep
# then rightly never sees a Ctrl-C, and the Ctrl-C tests, which send SIGINT as a terminal
# sends it to a foreground job, failed (20 of them). The suite takes Python's default handler
# back; its children start with SIGINT's default action (a caught signal is reset at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from tests.support.oracle_params import params_like_tokenstep  # noqa: E402
from tui.engine import Engine, EngineConfig, Model, SamplerSettings, default_model_path  # noqa: E402

params_like_tokenstep()


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="session")
def model() -> Model:
    return Model()


@pytest.fixture
def make_engine(model: Model):
    """Build engines on the shared model; every engine is closed after the test."""
    made: list[Engine] = []

    def make(settings: SamplerSettings | None = None, **config: object) -> Engine:
        cfg = EngineConfig(**{"n_ctx": 512, "n_threads": 2, **config})  # type: ignore[arg-type]
        eng = Engine(model, cfg, settings or SamplerSettings(temp=0.0))
        made.append(eng)
        return eng

    yield make
    for e in made:
        e.close()


@pytest.fixture(scope="session")
def draft_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A draft model for speculative decoding: the bundled model requantized to Q2_K by
    llama.cpp's own quantizer (``llama_model_quantize``, what ``llama-quantize
    --allow-requantize`` calls). Same vocabulary, other weights: it drafts well but not
    perfectly (about a third of its drafts accepted on a chat reply here)."""
    import llama_cpp

    out = tmp_path_factory.mktemp("draft") / "SmolLM2-135M-Instruct.Q2_K.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(
        str(default_model_path()).encode(), str(out).encode(), params
    )
    assert rc == 0, f"llama_model_quantize returned {rc}"
    return out


@pytest.fixture(scope="module", autouse=True)
def servers_stop_with_their_module():
    """After each module (its own fixtures are torn down first), no server it started may be
    running: a fixture or test that leaves one fails here, naming it (see tests/support/processes.py)."""
    yield
    from tests.support.processes import left_running, stop_all

    left = left_running()
    if left:
        stop_all(left)
        names = "; ".join(f"pid {pid}: {what}" for pid, what in left.items())
        pytest.fail(f"server processes outlived the fixtures that started them: {names}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The same check once more at the very end (a session-scoped fixture's server)."""
    from tests.support.processes import left_running, stop_all

    left = left_running()
    if left:
        stop_all(left)
        print(f"\nserver processes outlived their fixtures: {left}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
