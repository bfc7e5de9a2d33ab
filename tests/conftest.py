"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# llama.cpp's OpenMP workers spin while they wait for work (GNU OpenMP's default). On a
# loaded 2-core machine (CI, or a suite beside other work) a spinning worker holds a core the
# thread it waits for needs, and a decode measured at 10 ms here took seconds. Passive waiting
# costs a little speed on a quiet machine and no figure: it must be set before llama.cpp's
# library loads, and llama-server processes the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tui.engine import Engine, EngineConfig, Model, SamplerSettings, default_model_path  # noqa: E402


def _oracle_params_like_tokenstep() -> None:
    """llama-cpp-python's ``Llama`` (every oracle in these tests) takes no argument for
    ``use_extra_bufts`` and loads the model inside its constructor, so setting its
    ``model_params`` afterwards is too late. It builds them with
    ``llama_cpp.llama_cpp.llama_model_default_params()``: wrapped here, once per test process,
    so the oracle makes tokenstep's choice (off where this llama.cpp has the AMX kernels that
    crash on the first decode, llama.cpp's default elsewhere, so nothing changes there).
    tokenstep's own loads call ``llama_cpp.llama_model_default_params`` (the package's name,
    not this module attribute) and set the field themselves."""
    import llama_cpp.llama_cpp as low

    from tui.engine.model import repack
    from tui.engine.model.model import system_info

    if getattr(low.llama_model_default_params, "tokenstep_repack", False):
        return
    original = low.llama_model_default_params
    use_extra_bufts = repack.decide(system_info()).use_extra_bufts

    def default_params() -> low.llama_model_params:
        params = original()
        params.use_extra_bufts = use_extra_bufts
        return params

    default_params.tokenstep_repack = True  # type: ignore[attr-defined]
    low.llama_model_default_params = default_params  # type: ignore[assignment]


_oracle_params_like_tokenstep()


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
