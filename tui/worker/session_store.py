"""Saved sessions: the conversation, the settings and every step record, as JSON Lines.

Line 1 is a header object (``"tokenstep_session": 2``) with the model, the engine config, the
sampler settings and the conversation. Every other line is one step record in exactly the
format ``tokenstep trace`` prints (:func:`tui.engine.run.trace.record_to_dict`), so the same tools
read both. Files are written to a temporary file in the same folder and renamed over the
target, so a crash mid-write never leaves a half-written session behind.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.model import secret
from ..engine.model.chat_template import Message
from ..engine.model.errors import TokenstepError
from ..engine.run.step import StepRecord
from ..engine.run.trace import record_to_dict

if TYPE_CHECKING:
    from ..engine.run.backend import Backend

# 2: a path not taken keeps each pick whole (seed, chain cuts, forced); 1 kept [p, p', entropy]
FORMAT_VERSION = 2
READABLE = (1, 2)  # the formats this tokenstep resumes


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import, before any worker thread exists


def default_autosave_dir() -> Path:
    """``$TOKENSTEP_AUTOSAVE_DIR``, else ``$XDG_STATE_HOME/tokenstep/sessions``
    (``~/.local/state/tokenstep/sessions``)."""
    env = os.environ.get("TOKENSTEP_AUTOSAVE_DIR")
    if env:
        return Path(env).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "tokenstep" / "sessions"


def autosave_name(started: float, chat_no: int) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return f"session-{stamp}-{os.getpid()}-chat{chat_no}.jsonl"


def server_of(engine: Backend) -> dict[str, Any] | None:
    """``{"url", "api"}`` for a backend that steps a server, None for a local context."""
    server = engine.server
    if server is None:
        return None
    return {"url": server.url, "api": server.api}


def session_header(
    engine: Backend, messages: list[Message], *, raw: bool, prefix_cache: bool
) -> dict[str, Any]:
    """The first line of a session file. Over a server the batch sizes are the server's own,
    unknown here: they are null (resuming takes -b/-ub, or their defaults), and ``server``
    says where the session ran."""
    info = engine.info
    server = server_of(engine)
    config = asdict(engine.config)
    if server is not None:
        config["n_batch"] = config["n_ubatch"] = None
    return {
        "tokenstep_session": FORMAT_VERSION,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {
            "path": info.path,
            "name": info.name,
            "arch": info.arch,
            "desc": info.desc,
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
        },
        "config": config,
        "n_ctx": engine.n_ctx,
        "flash_attn": engine.flash_attn_resolved,
        "mode": "raw" if raw else "chat",
        "prefix_cache": prefix_cache,
        "settings": engine.settings.to_dict(),
        "conversation": [
            {"role": m.role, "content": m.content}
            | ({"tokens": list(m.tokens)} if m.tokens is not None else {})
            for m in messages
        ],
        "context_tokens": engine.tokens,
    } | ({"server": server} if server is not None else {})


def session_rows(
    engine: Backend,
    records: Iterable[StepRecord | dict[str, Any]],
    messages: list[Message],
    *,
    raw: bool,
    prefix_cache: bool,
) -> list[dict[str, Any]]:
    """The header, then one row per record (records already in dict form pass through: the
    engine's record log keeps old records on disk in that form)."""
    rows = [session_header(engine, messages, raw=raw, prefix_cache=prefix_cache)]
    rows += [
        r if isinstance(r, dict) else record_to_dict(engine, r, weights=False) for r in records
    ]
    rows[0]["n_records"] = len(rows) - 1
    return rows


def write_jsonl_atomic(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSON Lines to ``path`` via a temporary file and a rename."""
    target = Path(path).expanduser()
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise TokenstepError(f"cannot write to {folder}: {exc.strerror}.") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(secret.redact(json.dumps(row, ensure_ascii=False)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a saved file is a normal file
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TokenstepError(f"cannot save the session to {target}: {exc.strerror}.") from exc
    return target


def read_session(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the step records of a saved session."""
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    version = rows[0].get("tokenstep_session") if rows else None
    if type(version) is not int or version not in READABLE:  # true == 1 in Python
        raise TokenstepError(f"{path} is not a tokenstep session file.")
    return rows[0], rows[1:]
