"""``tokenstep serve`` in a real headless Chromium (Debian's ``chromium``), driven by
Playwright for Python. Playwright's own browser download cannot run here, so it is pointed at
/usr/bin/chromium. The terminal is drawn on a canvas: the test reads what Chromium received on
the page's websocket to know when the app has drawn, and the reply from the tab's autosave file.

Without Chromium or Playwright the test is skipped, saying why; ``TOKENSTEP_REQUIRE_BROWSER=1``
(set by .ci/run) turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from llama_cpp import Llama

from tests.support.serve_server import TIMEOUT, Served, conversation, gone, wait_for
from tui.worker.session_store import read_session

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


def browser_missing() -> str | None:
    if shutil.which(CHROMIUM) is None:
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; 'make test' does it as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture
def chromium(tmp_path):
    """A fresh headless Chromium with its own profile folder; closed after the test."""
    missing = browser_missing()
    if missing is not None:
        if os.environ.get("TOKENSTEP_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TOKENSTEP_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 800},
        )
        try:
            yield context
        finally:
            context.close()


class Screen:
    """The bytes Chromium's page received from the app, frame by frame (Playwright's view of
    the page's own websocket)."""

    def __init__(self, page) -> None:
        self.data = bytearray()
        self.lock = threading.Lock()
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: bytes | str) -> None:
        if isinstance(payload, bytes):
            with self.lock:
                self.data += payload

    def has(self, page, text: bytes) -> bool:
        page.wait_for_timeout(50)  # let Playwright deliver its events while polling
        with self.lock:
            return text in self.data


def greedy_oracle(model_path: Path, context: list[int], n_prompt: int) -> list[int]:
    """llama-cpp-python's own greedy generation from the same prompt tokens."""
    llm = Llama(model_path=str(model_path), n_ctx=512, n_threads=1, verbose=False)
    try:
        out: list[int] = []
        want = len(context) - n_prompt
        for t in llm.generate(context[:n_prompt], top_k=1, temp=0.0, repeat_penalty=1.0):
            out.append(t)
            if len(out) == want:
                break
        return out
    finally:
        llm.close()


def test_a_tab_in_chromium_chats_and_closing_it_ends_its_process(chromium, tmp_path, model_path):
    served = Served(tmp_path)
    try:
        page = chromium.new_page()
        screen = Screen(page)
        page.goto(served.url)
        assert page.title().startswith("tokenstep · ")  # the page title names the model
        page.wait_for_selector("body.-first-byte", timeout=TIMEOUT * 1000)  # the terminal drew
        wait_for(lambda: screen.has(page, b"waiting for a message"), "the app in the page")
        (app,) = served.apps()
        page.focus(".xterm-helper-textarea")  # keys to the terminal, no click on the app
        page.keyboard.type(MESSAGE)
        page.keyboard.press("Enter")

        def replied() -> list:  # the send is autosaved at once; wait for the one after the reply
            files = served.autosave_files()
            return files if files and len(conversation(files[0])) > 1 else []

        (saved,) = wait_for(replied, "the reply's autosave")
        assert saved.parent.name == "tab1"
        convo = conversation(saved)
        assert convo[0] == {"role": "user", "content": MESSAGE}
        assert convo[1]["role"] == "assistant" and convo[1]["content"].strip()
        # The reply is the greedy one: llama-cpp-python continues the same prompt the same way.
        header, records = read_session(saved)
        context = header["context_tokens"]
        n_prompt = sum(len(r["batch"]) for r in records if r["phase"] == "prefill")
        assert 0 < n_prompt < len(context)
        assert context[n_prompt:] == greedy_oracle(model_path, context, n_prompt)
        # A window too small, then big again: the app says so, then carries on.
        page.set_viewport_size({"width": 500, "height": 300})
        wait_for(lambda: screen.has(page, b"tokenstep needs at least"), "the too-small notice")
        page.set_viewport_size({"width": 1280, "height": 800})
        assert served.apps() == [app]
        page.close()  # the tab closes: its app process ends, reaped
        wait_for(lambda: gone(app), "the app process to end")
        assert served.apps() == []
    finally:
        served.close()
