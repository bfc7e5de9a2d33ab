"""``tokenstep serve``: the app in a browser, for a classroom, through textual-serve.

Every browser tab gets its own app process (``python -m tui`` with the app flags given to
``serve``), on the same model file, with its own autosave folder. The tabs live at once are
capped by ``--max-sessions``: a tab over the cap is told so and no process starts. A closed tab
ends its process: the app is asked to quit (its worker stops and autosaves), and a process that
does not end in time is terminated, then killed, and always waited for (no zombies).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import html
import ipaddress
import logging
import os
import shlex
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from aiohttp import web
from rich.logging import RichHandler
from textual_serve.app_service import AppService
from textual_serve.server import Server

from .args import build_parsers
from .engine.model import gguf_header, interrupt
from .engine.model.errors import TokenstepError
from .engine.model.info import facts
from .engine.model.model import default_model_path
from .serve_input import MAX_FRAME, Relay, RequestErrors, clamp_size, pace, read_frame
from .serve_remote import remote_api, without_api_key
from .trace_cli import preflight
from .worker import session_store

log = logging.getLogger("tokenstep.serve")

QUIT_S = 5.0  # a quit request lets the app stop its worker and autosave
TERM_S = 3.0  # then SIGTERM (textual's web driver turns it into the same exit), then SIGKILL
LOOPBACK_NAMES = {"localhost", "ip6-localhost"}

_PR_SET_PDEATHSIG = 1
_LIBC: Any = None
if sys.platform.startswith("linux"):
    with suppress(OSError):
        _LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_server() -> None:
    """In the app process, before exec: the kernel sends it SIGTERM if the server dies, so a
    killed server leaves no orphans behind."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def _ended(process: asyncio.subprocess.Process, timeout: float) -> bool:
    try:
        await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        return False
    return True


class TabService(AppService):
    """One tab's app process: started without a shell (the flags reach it as they were
    typed), with the tab's own autosave folder, and always ended and reaped."""

    def __init__(self, argv: list[str], env: dict[str, str], **kwargs: Any) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = argv
        self.extra_env = env
        self.number = 0  # the tab's number in the log and its autosave folder

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        env = self._build_environment(width=width, height=height)
        env.update(self.extra_env)
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            preexec_fn=_die_with_server,
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        pace(process.stdin)
        return process

    async def on_data(self, payload: bytes) -> None:
        # A tab that is gone cannot take the screen; keep reading the app's output anyway, so
        # it never blocks on a full pipe while it is being asked to quit.
        with suppress(ConnectionError, RuntimeError):
            await super().on_data(payload)

    async def on_meta(self, data: bytes) -> None:
        with suppress(ConnectionError, RuntimeError):
            await super().on_meta(data)

    async def stop(self) -> None:
        process, task = self._process, self._task
        if process is None or task is None:
            return
        self._task = None
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        if process.returncode is None:
            await self.send_meta({"type": "quit"})
        for ask, wait in ((None, QUIT_S), (process.terminate, TERM_S), (process.kill, None)):
            if ask is not None:
                with suppress(ProcessLookupError):
                    ask()
            if wait is None:
                await process.wait()
            elif await _ended(process, wait):
                break
        await task


def refusal(max_sessions: int, slots: int | None = None) -> str:
    if slots is not None and slots <= max_sessions:
        return (
            f"All {slots} slots of the llama-server are in use, one per tab (it was started "
            f"with -np {slots}). Close another tokenstep tab, or reload this page later."
        )
    return (
        f"All {max_sessions} tabs this server allows are in use (--max-sessions {max_sessions}). "
        "Close another tokenstep tab, or reload this page later."
    )


def remote_slots(url: str, api_key: str | None = None) -> tuple[int, str]:
    """With ``--server``: the llama-server's slot count (its ``-np``) and model file, asked once
    at start, so a dead server is one sentence here rather than an error in every tab."""
    from .engine.remote.remote_vocab import handshake
    from .engine.wire.remote_http import ServerClient

    client = ServerClient(url, 30.0, api_key=api_key)
    try:
        props = handshake(client)
    finally:
        client.close()
    name = Path(str(props.get("model_path") or "?")).name.removesuffix(".gguf")
    return max(1, int(props.get("total_slots") or 1)), name


class TabServer(Server):
    """textual-serve's server with a cap on live tabs, one autosave folder per tab, and a
    page title that names the model."""

    def __init__(
        self,
        app_argv: list[str],
        *,
        host: str,
        port: int,
        max_sessions: int,
        title: str,
        autosave_root: Path,
        slots: int | None = None,
    ) -> None:
        self.app_argv = [sys.executable, "-m", "tui", *app_argv]
        super().__init__(shlex.join(self.app_argv), host=host, port=port, title=title)
        self.max_sessions = max_sessions
        self.autosave_root = autosave_root
        self.slots = slots  # with --server: each tab steps its own slot of the llama-server
        self.cap = max_sessions if slots is None else min(max_sessions, slots)
        self.live: dict[str, TabService] = {}
        self.slot_of: dict[str, int] = {}
        self.opened = 0
        root = str(Path(__file__).resolve().parent.parent)  # the tabs run this same package
        self.env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        }

    def full(self) -> bool:
        return len(self.live) >= self.cap

    def free_slot(self) -> int:
        """The lowest slot no live tab holds (the cap keeps one free whenever a tab opens)."""
        taken = set(self.slot_of.values())
        return next(i for i in range(self.cap) if i not in taken)

    def announce(self, *_: object) -> None:
        """Printed once the port is bound (aiohttp calls it after the sites start)."""
        each = "each its own app process"
        if self.slots is not None:
            each += f" stepping its own one of the llama-server's {self.slots} slots"
        print(
            f"tokenstep serve: {self.title} on {self.public_url} (at most {self.cap} tabs, {each})",
            flush=True,
        )
        print(f"autosaves: {self.autosave_root}/tabN; Ctrl+C stops the server.", flush=True)

    def initialize_logging(self) -> None:
        """textual-serve's log handler without the locals in tracebacks (they held request
        bytes), and aiohttp's unparsable requests as one line (see RequestErrors)."""
        handler = RichHandler(
            show_path=False, show_time=False, rich_tracebacks=True, console=self.console
        )
        logging.basicConfig(level="INFO", format="%(message)s", handlers=[handler])
        logging.getLogger("aiohttp.server").addFilter(RequestErrors())

    def serve(self, debug: bool = False) -> None:
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_exit)
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            handle_signals=False,
            loop=loop,
            print=self.announce,
            access_log=None,
        )

    async def on_startup(self, app: web.Application) -> None:
        """Nothing before the port is bound (see :meth:`announce`)."""

    async def on_shutdown(self, app: web.Application) -> None:
        await asyncio.gather(*(s.stop() for s in list(self.live.values())))

    async def handle_index(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]
        title = html.escape(self.title)
        if self.full():
            page = (
                f"<!DOCTYPE html><html><head><title>{title}</title></head>"
                f"<body><h1>{title}</h1><p>{html.escape(self.refusal())}</p></body></html>"
            )
            return web.Response(status=503, text=page, content_type="text/html")
        # The page's own URLs (static files, the websocket) as this browser reached the server,
        # so a server listening on 0.0.0.0 hands out an address the browser can use.
        self.public_url = f"{request.scheme}://{request.host}"
        response = await super().handle_index(request)  # type: ignore[misc]
        assert isinstance(response, web.Response) and response.text is not None
        response.text = response.text.replace("<head>", f"<head><title>{title}</title>", 1)
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_FRAME)
        await websocket.prepare(request)
        if self.full():  # no process: the message is drawn on the tab's terminal
            text = self.refusal()
            await websocket.send_bytes(f"\x1b[2J\x1b[H\x1b[1m{text}\x1b[0m\r\n".encode())
            async for _ in websocket:
                pass
            return websocket
        self.opened += 1
        number = self.opened
        folder = self.autosave_root / f"tab{number}"
        argv = list(self.app_argv)
        slot = None if self.slots is None else self.free_slot()
        if slot is not None:
            argv += ["--slot", str(slot)]
        service = TabService(
            argv,
            {**self.env, "TOKENSTEP_AUTOSAVE_DIR": str(folder)},
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
        )
        service.number = number
        self.live[service.app_service_id] = service  # before any await: the cap holds
        if slot is not None:
            self.slot_of[service.app_service_id] = slot
        try:
            width, height = clamp_size(request.query.get("width"), request.query.get("height"))
            await service.start(width, height)
            log.info(
                "tab %d opened: app process %s, autosave in %s%s",
                number,
                service.pid,
                folder,
                "" if slot is None else f", server slot {slot}",
            )
            await self._process_messages(websocket, service)
        except Exception as error:  # a bad message ends this tab, never the server
            log.warning("tab %d: %s", number, error)
        finally:
            await service.stop()
            del self.live[service.app_service_id]
            self.slot_of.pop(service.app_service_id, None)
            log.info(
                "tab %d closed: app process %s ended (exit code %s)",
                number,
                service.pid,
                service.returncode,
            )
        return websocket

    async def _process_messages(
        self, websocket: web.WebSocketResponse, app_service: AppService
    ) -> None:
        """Relay the tab's frames to its app, each checked first (see :mod:`tui.serve_input`)."""
        relay = Relay(app_service)
        try:
            async for message in websocket:
                frame = read_frame(message)
                if frame is not None and frame.kind == "ping":
                    await websocket.send_json(["pong", frame.echo])
                elif (warning := relay.take(frame)) is not None:
                    log.warning("tab %s: %s", getattr(app_service, "number", "?"), warning)
        finally:
            await relay.close()

    def refusal(self) -> str:
        return refusal(self.max_sessions, self.slots)


def model_title(app_args: argparse.Namespace) -> str:
    path = Path(app_args.model) if app_args.model else default_model_path()
    return f"tokenstep · {facts(gguf_header.read_header(path)).name}"


def serve_main(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise TokenstepError(f"--port must be between 1 and 65535, not {args.port}.")
    if args.max_sessions < 1:
        raise TokenstepError(f"--max-sessions must be at least 1, not {args.max_sessions}.")
    app_args = build_parsers()["app"].parse_args(args.app_argv)
    preflight(app_args)  # a bad app flag or model file fails once here, not in every tab
    slots, title = None, ""
    app_argv, key_env = without_api_key(list(args.app_argv))
    if app_args.server:
        if app_args.slot is not None:
            raise TokenstepError(
                "tokenstep serve gives each tab its own slot of the llama-server; leave out --slot."
            )
        api, name = remote_api(app_args)
        if api == "openai":  # no slots over /v1: every tab sends its own requests
            title = f"tokenstep · {name} (OpenAI-compatible server)"
            if app_args.api is None:
                app_argv += ["--api", "openai"]
        else:
            from .engine.remote.openai_backend import api_key_from

            slots, name = remote_slots(app_args.server, api_key_from(app_args.api_key))
            title = f"tokenstep · {name} (llama-server)"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    server = TabServer(
        app_argv,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        title=title or model_title(app_args),
        autosave_root=session_store.default_autosave_dir() / f"serve-{stamp}-{os.getpid()}",
        slots=slots,
    )
    server.env.update(key_env)  # the key reaches each tab's environment, never its argv
    if not is_loopback(args.host):
        print(
            f"tokenstep serve: warning: listening on {args.host}, so anyone who can reach port "
            f"{args.port} can use the model (up to {server.cap} tabs at once).",
            file=sys.stderr,
            flush=True,
        )
    interrupt.hand_over()  # the server's event loop takes Ctrl-C from here on
    try:
        server.serve()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise TokenstepError(f"cannot listen on {args.host}:{args.port}: {reason}.") from exc
    return 0
