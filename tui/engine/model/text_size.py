"""How much text tokenstep tokenizes at once: a context's worth of bytes, times a margin.

Tokenizing costs about 130 bytes of memory per input byte (a 10 MB ``tokenize --stdin`` peaks
at 1.34 GB, a 20 MB resume message at 2.74 GB), even when the result cannot fit the context.
Text averages a few bytes per token (this README: 73,593 bytes, 23,173 SmolLM2 tokens), so a
text over :data:`BYTES_PER_TOKEN` (32, ten times that) per context token is refused in one
sentence before it is tokenized. A margin, not a proof: a text of B bytes is at least B / L
tokens, L the longest piece, and SmolLM2 has 47 pieces over 32 bytes (the longest 81).
:data:`FLOOR_BYTES` keeps small contexts from refusing cheap texts (1 MiB tokenizes within
about 130 MB); below 12,945 tokens of context it is over 81 bytes a token, so there no refused
text could have fit.
"""

from __future__ import annotations

from typing import BinaryIO

from .errors import TokenstepError

BYTES_PER_TOKEN = 32
FLOOR_BYTES = 1 << 20


def max_bytes(n_ctx: int) -> int:
    """The most bytes of text tokenized for a context of ``n_ctx`` tokens."""
    return max(FLOOR_BYTES, BYTES_PER_TOKEN * max(0, n_ctx))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def refusal(what: str, n_bytes: int, n_ctx: int, *, bound: str = "") -> str:
    """One sentence: ``what`` is too large to tokenize for this context (``bound``: "at
    least " or "more than " when only that much is known of its size)."""
    size = bound + _mib(n_bytes)
    return (
        f"{what} is {size}, more than a context of {n_ctx:,} tokens can hold "
        f"(tokenstep tokenizes at most {_mib(max_bytes(n_ctx))}, {BYTES_PER_TOKEN} bytes per "
        "token); shorten it."
    )


def check(what: str, n_bytes: int, n_ctx: int) -> None:
    """Refuse ``n_bytes`` of text over :func:`max_bytes` for ``n_ctx``."""
    if n_bytes > max_bytes(n_ctx):
        raise TokenstepError(refusal(what, n_bytes, n_ctx))


def check_text(what: str, text: str, n_ctx: int) -> None:
    """:func:`check` for a str: its characters first (each is at least one UTF-8 byte), so a
    huge text is refused without encoding it."""
    limit = max_bytes(n_ctx)
    if len(text) > limit:
        raise TokenstepError(refusal(what, len(text), n_ctx, bound="at least "))
    if len(text) * 4 > limit:  # only then can the UTF-8 form be over the bound
        check(what, len(text.encode("utf-8", "surrogatepass")), n_ctx)


def read_bounded(fh: BinaryIO, what: str, n_ctx: int) -> bytes:
    """Read ``fh`` up to the bound for ``n_ctx``; past it, one sentence, the rest unread."""
    limit = max_bytes(n_ctx)
    raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise TokenstepError(refusal(what, limit, n_ctx, bound="more than "))
    return raw
