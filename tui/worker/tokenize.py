"""``/tokenize TEXT`` in the chat box: the text's tokens in the notice, nothing sent.

The engine's vocabulary tokenizes it as a message's text is tokenized inside the chat
template (no BOS of its own; special-token text stays plain text), on the worker thread like
every other command. ``tokenstep tokenize`` does the same from the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import display_bytes, visible

SHOWN = 40  # pieces in the notice (it has three rows)
def tokenize_note(vocab: Any, note: Callable[..., None], text: str) -> None:
    """The notice for /tokenize TEXT: its pieces and ids from ``vocab``, nothing sent."""
    if not text:
        note("/tokenize TEXT shows TEXT's tokens and ids without sending it.", "warn")
        return
    try:
        ids = vocab.tokenize(text, add_special=False, parse_special=False)
    except TokenstepError as exc:
        note(f"/tokenize: {exc}", "error")
        return
    parts = []
    for t in ids[:SHOWN]:
        piece = visible(display_bytes(vocab.piece(t)))
        parts.append(f"{piece}·{t}")
    more = f" … {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    note(
        f"/tokenize, not sent: {len(ids)} token(s), {len(text.encode('utf-8'))} bytes: "
        + " ".join(parts)
        + more
    )
