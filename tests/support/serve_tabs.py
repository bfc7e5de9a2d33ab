"""Tabs of ``tokenstep serve`` opened over its websocket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp

from tests.support.serve_server import TIMEOUT, Served

MESSAGE = "Write a long story about a dragon who learns to read."


class Tab:
    """One browser tab, as textual.js is to the server: a websocket and the screen bytes.

    A task reads the socket all the time, as a browser does. aiohttp's client answers the
    server's heartbeat ping only inside ``receive()``, and serve closes a socket whose pong is
    late (``heartbeat=15``: a ping after 15 s of silence, then 7.5 s for the pong). A tab left
    unread while a test waited on another tab's reply for over 22 s (two tabs, each streaming a
    reply, beside a 2-core load) was closed by the server, mid-reply."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.screen = bytearray()
        self.texts: list[str] = []  # text frames: serve's answers to ["ping", ...]
        self.closed = False
        self._news = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self.screen += msg.data
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    self.texts.append(msg.data)
                else:  # CLOSE, CLOSING, CLOSED or ERROR: nothing more comes
                    return
                self._news.set()
        finally:
            self.closed = True
            self._news.set()

    async def until(self, cond: Callable[[bytes], bool], what: str) -> None:
        await self._until(lambda: cond(bytes(self.screen)), what)

    async def text(self, since: int, what: str) -> str:
        """The first text frame after the first `since` ones."""
        await self._until(lambda: len(self.texts) > since, what)
        return self.texts[since]

    async def _until(self, cond: Callable[[], bool], what: str) -> None:
        async def wait() -> None:
            while True:
                self._news.clear()
                if cond():
                    return
                if self.closed:
                    raise AssertionError(f"the socket closed while waiting for {what}")
                await self._news.wait()

        try:
            await asyncio.wait_for(wait(), TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None

    async def send(self, kind: str, data: object) -> None:
        await self.ws.send_str(json.dumps([kind, data]))


async def open_tab(session: aiohttp.ClientSession, server: Served) -> Tab:
    ws = await session.ws_connect(f"{server.url}/ws?width=120&height=40")
    return Tab(ws)


def drawn(screen: bytes) -> bool:
    return b"waiting for a message" in screen  # the header, once the model has loaded


def run(coro):
    return asyncio.run(coro)
