"""What a broken HTTP exchange means, in plain words (no Python exception names).

:mod:`~tui.engine.wire.remote_http` meets these faults; each becomes part of one sentence here:

* http.client's own exceptions: a reply cut short (``IncompleteRead``: the server answered
  and closed mid-reply), a status line that is not HTTP (``BadStatusLine``), a header line
  over http.client's 65,536 bytes (``LineTooLong``), too many headers, anything else that
  breaks HTTP;
* ``Retry-After`` as a number of seconds (however large), as an HTTP date, or as neither;
* a ``Content-Length`` that is not a whole number of bytes (http.client takes a negative one
  for "read until the connection closes", so the request waited its whole ``--timeout``).
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import time

DAY_S = 86_400


def broken_reply(exc: http.client.HTTPException) -> str:
    """What went wrong, after "the server at URL ... ": a clause without exception names."""
    if isinstance(exc, http.client.IncompleteRead):  # fewer bytes than its Content-Length
        return "closed the connection in the middle of its reply"
    if isinstance(exc, http.client.LineTooLong):
        return "sent a header line longer than the 65,536 bytes an HTTP client reads"
    if isinstance(exc, http.client.BadStatusLine):
        return "answered with something that is not an HTTP reply"
    if "got more than" in str(exc) and "headers" in str(exc):  # http.client.HTTPException
        return "sent more than the 100 header lines an HTTP client reads"
    return "sent a reply that does not follow HTTP"


def retry_wait(value: str | None, now: float | None = None) -> str:
    """The wait a ``Retry-After`` header asks for, as a clause: "it asks to wait 30 s", "it
    asks to wait more than a day", "it asks to wait until 2026-12-03 09:00 UTC (90 s)", "it
    gives no wait", "its Retry-After is neither seconds nor a date"."""
    text = (value or "").strip()
    if not text:
        return "it gives no wait"
    if text.isdigit():
        if len(text) > 9 or int(text) > DAY_S:
            return "it asks to wait more than a day"
        return f"it asks to wait {int(text)} s"
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        when = None
    if when is None:
        return "its Retry-After is neither a number of seconds nor an HTTP date"
    if when.tzinfo is None:  # "-0000": an HTTP date is always GMT
        when = when.replace(tzinfo=datetime.UTC)
    left = when.timestamp() - (time.time() if now is None else now)
    stamp = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    if left <= 0:
        return f"it asked to wait until {stamp}, which has passed"
    if left > DAY_S:
        return f"it asks to wait until {stamp}, more than a day"
    return f"it asks to wait until {stamp} ({left:.0f} s)"


def bad_length(value: str | None) -> str | None:
    """Why a ``Content-Length`` header cannot be a body's length (None: it can, or there is
    none)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return None
    shown = text if len(text) <= 24 else text[:24] + "…"
    return f"sent a Content-Length of {shown!r}, which is not a number of bytes"
