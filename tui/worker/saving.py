"""Saving the chat: ctrl+s to a chosen file, autosave after every reply, on a new chat and on
quit. The file format is :mod:`tui.worker.session_store`'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.model.errors import TokenstepError
from . import paths, session_store, surprise
from .chat import messages_now
from .playback import Playback
from .state import State

if TYPE_CHECKING:
    from .parts import WorkerParts


WEIGHTS_LEFT_OUT = (
    "attention weights are not saved (each record keeps their shape): --resume re-prefills "
    "the context with the capture on, which computes them again"
)


def n_records(w: WorkerParts) -> int:
    """Step records of this chat."""
    return len(w.engine.records) - w.state.records_from


def write(w: WorkerParts, path: str | Path) -> Path:
    eng = w.engine
    rows = session_store.session_rows(
        eng,
        eng.records.dicts(w.state.records_from),
        messages_now(w),
        raw=w.raw,
        prefix_cache=w.prefix_cache,
    )
    rows[0]["attention"] = w.attention.state()
    rows[0]["paths"] = paths.to_json(w)
    if any("attention_shape" in r for r in rows[1:]):
        rows[0]["attention_weights"] = WEIGHTS_LEFT_OUT
    return session_store.write_jsonl_atomic(path, rows)


def save(w: WorkerParts, path: str) -> None:
    target = write(w, path)
    w.state.saved(str(target), autosave=False)
    left_out = "; attention weights left out, --resume captures them again" * w.attention.on
    w.state.note(f"Saved {n_records(w)} step records and the conversation to {target}{left_out}.")


def autosave(w: WorkerParts) -> None:
    """Write the chat to its autosave file; a failure turns autosave off and says so."""
    path = w.autosave_path
    if path is None or (w.engine.n_past == 0 and not w.state.messages):
        return
    try:
        write(w, path)
    except TokenstepError as exc:
        w.state.note(f"Autosave failed: {exc} Autosave is off.", "error")
        w.autosave_off()
        return
    w.state.saved(str(path), autosave=True)


def new_chat(w: WorkerParts) -> None:
    """Autosave this chat, empty the KV cache, start the next chat's state."""
    if w.state.dirty_since_save:
        autosave(w)
    eng = w.engine
    eng.reset()
    old = w.state
    w.new_state(
        State(
            playback=Playback(old.mode),
            chat_no=old.chat_no + 1,
            records_from=len(eng.records),
            turns_from=len(eng.turns),
            shifts_from=len(eng.shifts),
            surprise_scale=old.surprise_scale,
        )
    )
    w.state.ran("new")
    path = w.autosave_path
    where = f" Autosave: {path}." if path else ""
    w.state.note(f"New chat: the KV cache is empty.{where}{surprise.keep(w)}")
