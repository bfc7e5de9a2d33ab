"""What a browser tab may send to its app process, checked before anything reaches the app.

textual-serve hands every websocket frame to the app as it came: ``["resize", {"width": -1,
"height": 99999}]`` made the app lay out 99,999 rows and freeze (a closed tab then ended in
SIGKILL, its autosave lost), and a 1 MB ``["stdin", ...]`` went to the app's input thread as
one packet, so the quit a closed tab sends waited behind the parse of all of it (over 9 s).
Here a frame is read into a :class:`Frame` or dropped: sizes are clamped to what a terminal
can be (:data:`MAX_COLS` × :data:`MAX_ROWS`; below 80×24 the app says it is too small, as in a
real terminal), text is cut into :data:`CHUNK` byte pieces (what a terminal driver reads at a
time), and anything else (not JSON, an unknown kind, a wrong type) is dropped.

Measured on the bundled model, a tab closed after a resize to 500×200 ended its app in 1.4 s
(1.2 s at 120×40), at 120×2,000 in 3.5 s, at 120×99,999 never (killed after 8 s).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import re
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import WSMessage, WSMsgType
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

if TYPE_CHECKING:
    from textual_serve.app_service import AppService

MAX_COLS, MAX_ROWS = 500, 200  # an 8K screen at a small font; the app lays out every cell
CHUNK = 4096  # bytes per stdin packet: what a terminal driver reads at a time
MAX_FRAME = 4 * 1024 * 1024  # bytes in one websocket frame (aiohttp's default, stated)
MAX_BACKLOG = 8 * 1024 * 1024  # stdin bytes waiting for a slow app before frames are dropped
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a valid pair is one character once parsed
KINDS = frozenset({"stdin", "resize", "ping", "focus", "blur"})  # what textual.js sends


@dataclass(frozen=True)
class Frame:
    kind: str  # one of KINDS
    data: bytes = b""  # stdin: UTF-8 bytes
    size: tuple[int, int] = (80, 24)  # resize: columns, rows (clamped)
    echo: str | int | float | None = None  # ping: sent back as it came


def clamp_size(
    width: object, height: object, default: tuple[int, int] = (80, 24)
) -> tuple[int, int]:
    """A terminal size from what a tab says: whole numbers (or their text), clamped to
    1..MAX_COLS × 1..MAX_ROWS; anything else is the default."""
    return _dim(width, default[0], MAX_COLS), _dim(height, default[1], MAX_ROWS)


def _dim(value: object, default: int, most: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and len(value) <= 12:
        try:
            value = int(value.strip())
        except ValueError:
            return default
    if not isinstance(value, int):
        return default
    return min(max(value, 1), most)


def read_frame(message: WSMessage) -> Frame | None:
    """One websocket frame as a :class:`Frame`, or None when it is not one textual.js sends."""
    if message.type != WSMsgType.TEXT or not isinstance(message.data, str):
        return None
    try:
        envelope = json.loads(message.data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(envelope, list) or not envelope or envelope[0] not in KINDS:
        return None
    kind = envelope[0]
    data = envelope[1] if len(envelope) > 1 else None
    if kind == "stdin":
        if not isinstance(data, str) or not data:
            return None
        # JSON can carry a lone surrogate ("\\ud800"), which is no character: U+FFFD stands in.
        return Frame(kind, data=_LONE_SURROGATE.sub("\ufffd", data).encode("utf-8"))
    if kind == "resize":
        if not isinstance(data, dict):
            return None
        return Frame(kind, size=clamp_size(data.get("width"), data.get("height")))
    if kind == "ping":
        if data is not None and not isinstance(data, str | int | float):
            return None
        if isinstance(data, str) and len(data) > 64:
            return None
        return Frame(kind, echo=data)
    return Frame(kind)


def chunks(data: bytes, size: int = CHUNK) -> list[bytes]:
    """``data`` in pieces of at most ``size`` bytes, never splitting a UTF-8 character (the
    app's driver decodes each piece incrementally, but whole characters keep each one valid)."""
    out: list[bytes] = []
    start = 0
    while start < len(data):
        end = min(start + size, len(data))
        while end < len(data) and end > start + 1 and data[end] & 0xC0 == 0x80:
            end -= 1  # a continuation byte: end before the character it belongs to
        out.append(data[start:end])
        start = end
    return out


def pace(stdin: asyncio.StreamWriter) -> None:
    """Let at most a few pieces of input wait between the server and the app: the pipe to the
    app's stdin is cut from the kernel's 64 kB to one page, and the writer's buffer to one
    piece. A tab closed during a flood then has its quit read after about 8 kB of input, not
    128 kB (about 4 s of key parsing in the app's input thread)."""
    transport = stdin.transport
    transport.set_write_buffer_limits(high=CHUNK)  # type: ignore[attr-defined]
    pipe = transport.get_extra_info("pipe")
    if pipe is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
        with suppress(OSError, ValueError):
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, CHUNK)


class Relay:
    """A tab's frames on their way to its app, in order, a piece at a time, on a task of their
    own: the websocket is read on meanwhile, so a closed tab is seen at once, and its quit
    waits behind at most a pipe's worth of input rather than all that was sent. Input waiting
    for a slow app is bounded by :data:`MAX_BACKLOG` bytes."""

    def __init__(self, service: AppService) -> None:
        self.service = service
        self.queue: asyncio.Queue[Frame] = asyncio.Queue()
        self.backlog = 0  # stdin bytes queued, not yet written to the app
        self.dropped = 0  # frames that were not textual.js's
        self.task = asyncio.create_task(self._run())

    def take(self, frame: Frame | None) -> str | None:
        """Queue a checked frame; what to log when one is dropped (the first bad frame of a
        tab, and every stdin frame the backlog has no room for), without its bytes."""
        if frame is None:
            self.dropped += 1
            if self.dropped == 1:
                return "dropped a websocket frame textual.js does not send (and drops any more)"
            return None
        if frame.kind == "stdin":
            if self.backlog + len(frame.data) > MAX_BACKLOG:
                return (
                    f"dropped {len(frame.data):,} bytes of input: {self.backlog:,} bytes "
                    "still wait for the app"
                )
            self.backlog += len(frame.data)
            for piece in chunks(frame.data):
                self.queue.put_nowait(Frame("stdin", data=piece))
        else:
            self.queue.put_nowait(frame)
        return None

    async def _run(self) -> None:
        service = self.service
        while True:
            frame = await self.queue.get()
            if frame.kind == "stdin":
                await service.send_bytes(frame.data)
                self.backlog -= len(frame.data)
            elif frame.kind == "resize":
                await service.set_terminal_size(*frame.size)
            elif frame.kind == "blur":
                await service.blur()
            elif frame.kind == "focus":
                await service.focus()

    async def close(self) -> None:
        """Whatever has not reached the app yet is dropped: the tab is gone."""
        self.task.cancel()
        with suppress(asyncio.CancelledError):
            await self.task


class RequestErrors(logging.Filter):
    """aiohttp logs a request it cannot parse (a 10,000-character URL: "Got more than 8190
    bytes when reading") with a traceback whose text and locals hold the request's bytes.
    This keeps one line that says what was refused and why, without them."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True  # a fault of ours: its traceback is kept (the handler shows no locals)
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        if isinstance(exc, LineTooLong):
            why = "its request line or a header is longer than the 8,190 bytes aiohttp reads"
        else:
            why = f"it is not a valid HTTP request ({type(exc).__name__})"
        record.msg = "refused a request from %s: %s (HTTP %s)."
        record.args = (remote, why, exc.code)
        record.exc_info = None
        record.exc_text = None
        return True
