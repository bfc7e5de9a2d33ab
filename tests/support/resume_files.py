"""Resume files written by the tests: a session header as tokenstep saves it, with the fields
a test wants changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tui.worker.session_store import FORMAT_VERSION


def write_resume(path: Path, model: Path, *, config: dict[str, Any] | None = None) -> Path:
    """A raw-mode session of three context tokens on ``model``, greedy, -c 512."""
    header = {
        "tokenstep_session": FORMAT_VERSION,
        "model": {"path": str(model)},
        "mode": "raw",
        "conversation": [],
        "context_tokens": [1, 2, 3],
        "settings": {
            "temp": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 1, "greedy": True
        },
        "config": {
            "n_ctx": 512, "n_batch": 512, "n_ubatch": 512, "context_full": "stop", "n_keep": 0,
            **(config or {}),
        },
    }
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    return path


def good_header() -> dict[str, Any]:
    """What :func:`tui.worker.session_store.session_header` writes, for the bundled model."""
    return {
        "tokenstep_session": 1,
        "saved_at": "2026-01-01T00:00:00+0000",
        "model": {"path": "nowhere.gguf", "name": "SmolLM2 135M Instruct", "n_vocab": 49152},
        "config": {
            "n_ctx": 512,
            "n_batch": 2048,
            "n_ubatch": 512,
            "n_threads": 0,
            "flash_attn": "auto",
            "cache_type_k": "f16",
            "cache_type_v": "f16",
            "n_seq_max": 2,
            "context_full": "stop",
            "n_keep": 0,
            "swa_full": True,
        },
        "mode": "chat",
        "prefix_cache": True,
        "settings": {
            "temp": 0.8,
            "top_k": 40,
            "top_p": 0.95,
            "min_p": 0.05,
            "seed": 42,
            "greedy": False,
        },
        "conversation": [{"role": "user", "content": "hi"}],
        "context_tokens": [1, 2, 3],
        "attention": {"on": False, "layer": 0, "head": None},
    }


def write(path: Path, header: Any) -> Path:
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")  # NaN/Infinity as JSON has them
    return path
