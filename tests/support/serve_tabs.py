"""Tabs of ``tokenstep serve`` opened over its websocket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp

from tests.support.serve_server import TIMEOUT, Served

MESSAGE = "Write a long story about a dragon who learns to read."


class Tab:
    """One browser tab, as textual.js is to the server: a websocket and the screen bytes."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.screen = bytearray()
        self.closed = False

    async def until(self, cond: Callable[[bytes], bool], what: str) -> None:
        async def read() -> None:
            while not cond(bytes(self.screen)):
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self.screen += msg.data
                elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    raise AssertionError(f"the socket closed while waiting for {what}")

        try:
            await asyncio.wait_for(read(), TIMEOUT)
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
