"""User-facing errors.

Every failure that a user can cause (a bad path, a broken model file, a flag out of range,
a prompt that does not fit) is raised as :class:`TokenstepError` with one plain sentence.
The CLI prints that sentence and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations

from . import secret


class TokenstepError(Exception):
    """An error whose message is one sentence meant for the user. The message passes through
    :func:`~tui.engine.model.secret.redact`: a server's error text may quote the API key."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(secret.redact(a) if isinstance(a, str) else a for a in args))


class ModelError(TokenstepError):
    """The model file is missing, unreadable, not GGUF, corrupt or unsupported."""


class ContextFullError(TokenstepError):
    """The tokens do not fit in the context window."""


def one_line(message: str) -> str:
    """``message`` as a single printable line.

    Messages quote paths and metadata that came from outside (a file name, a model's own
    text), so newlines, escape sequences and other control characters are shown escaped
    (``\\n``, ``\\x1b``) rather than sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
