"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui.engine import Engine, EngineConfig, Model, SamplerSettings, default_model_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


def logits_oracle(model_path: Path, n_ctx: int = 512, *, flash_attn: bool = False):
    """llama-cpp-python's own ``Llama`` keeping every row's logits (``logits_all``): the
    outside oracle for per-position figures. The caller closes it."""
    from llama_cpp import Llama

    return Llama(
        model_path=str(model_path),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_threads=2,
        logits_all=True,
        flash_attn=flash_attn,
        verbose=False,
    )


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


def run_cli(
    *args: str, stdin: bytes | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``python -m tui ARGS`` as a user would, capturing bytes."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "tui", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
