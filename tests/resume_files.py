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
