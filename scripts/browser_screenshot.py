"""screenshots/browser.png: Chromium's own screenshot of ``tokenstep serve`` after a reply.

    python scripts/browser_screenshot.py      (also run by `make screenshots`)

Starts ``tokenstep serve --greedy`` on a free port on 127.0.0.1, opens the page in Debian's
headless Chromium through Playwright (pointed at /usr/bin/chromium), sends a message, waits for
the reply to end and its autosave, and saves the page as Chromium draws it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots" / "browser.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MESSAGE = "Name three colors."
TIMEOUT = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    if not os.access(CHROMIUM, os.X_OK):
        print(f"browser.png: skipped, no Chromium at {CHROMIUM}")
        return 0
    from playwright.sync_api import sync_playwright

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TOKENSTEP_AUTOSAVE_DIR": tmp, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, "-m", "tui", "serve", "--port", str(port), "--greedy"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert server.stdout is not None
            if b"tokenstep serve:" not in server.stdout.readline():
                raise SystemExit("browser.png: the server did not start")
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep draining
            shoot(sync_playwright, f"http://127.0.0.1:{port}", Path(tmp))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


def shoot(sync_playwright, url: str, tmp: Path) -> None:
    received = bytearray()

    def frame(payload: bytes | str) -> None:
        if isinstance(payload, bytes):
            received.extend(payload)

    def wait(cond, what: str) -> None:
        end = time.monotonic() + TIMEOUT
        while not cond():
            if time.monotonic() > end:
                raise SystemExit(f"browser.png: timed out waiting for {what}")
            page.wait_for_timeout(50)

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = context.new_page()
            page.on("websocket", lambda ws: ws.on("framereceived", frame))
            page.goto(url)
            wait(lambda: b"waiting for a message" in received, "the app")
            page.focus(".xterm-helper-textarea")  # keys to the terminal, no click on the app
            page.keyboard.type(MESSAGE)
            page.keyboard.press("Enter")
            wait(lambda: b"reply ended" in received, "the reply")
            wait(lambda: b"(written)" in received, "the autosave")  # the chat box says so
            page.wait_for_timeout(500)  # the canvas paints what arrived
            OUT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(OUT))
        finally:
            context.close()


if __name__ == "__main__":
    sys.exit(main())
