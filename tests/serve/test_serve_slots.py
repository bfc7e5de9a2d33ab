"""``tokenstep serve --server URL``: every tab steps the same real llama-server, each on its own
slot (``id_slot``), so a class shares one model. The slots a tab was given are read from the
kernel (each app process's command line) and from the server (``GET /slots``)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from tests.support.cli import one_sentence, run_cli
from tests.support.llama_server import free_port as server_port
from tests.support.llama_server import start_server
from tests.support.serve_server import Served, conversation, gone, wait_for
from tests.support.serve_tabs import drawn, open_tab, run


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory):
    """llama-server with the bundled model and -np 2 (start_server's default)."""
    server = start_server(tmp_path_factory.mktemp("llama-server"))
    yield server
    server.stop()


def slot_flag(pid: int) -> int:
    """The --slot an app process was started with, from its command line in /proc."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return int(argv[argv.index(b"--slot") + 1])


def slots_used(url: str) -> dict[int, int]:
    """Per slot id, the prompt tokens of the last request it served (``n_prompt_tokens`` in
    the server's ``/slots``; absent for a slot that has served none)."""
    with urllib.request.urlopen(url + "/slots", timeout=30) as resp:
        slots = json.loads(resp.read())
    return {int(s["id"]): int(s.get("n_prompt_tokens") or 0) for s in slots}


def test_each_tab_steps_its_own_slot_and_a_third_is_refused(tmp_path, two_slots):
    served = Served(tmp_path, "--server", two_slots.url, max_sessions=8)
    try:
        announced = "".join(served.lines)
        assert "at most 2 tabs" in announced and "llama-server's 2 slots" in announced

        async def go() -> None:
            async with aiohttp.ClientSession() as session:
                async with session.get(served.url) as page:
                    assert "(llama-server)</title>" in await page.text()
                tabs = [await open_tab(session, served) for _ in range(2)]
                for tab in tabs:
                    await tab.until(drawn, "the app")
                apps = sorted(served.apps())
                assert sorted(slot_flag(p) for p in apps) == [0, 1]
                third = await open_tab(session, served)
                await third.until(lambda s: b"-np 2" in s, "the refusal")
                assert b"All 2 slots of the llama-server are in use" in third.screen
                assert sorted(served.apps()) == apps  # the refusal started no process
                await third.ws.close()
                for tab in tabs:  # the same message in both: greedy, so the same reply
                    await tab.send("stdin", "Say the number 7.\r")
                for tab in tabs:
                    await tab.until(lambda s: b"reply ended" in s, "the reply")
                used = slots_used(two_slots.url)
                assert used[0] > 0 and used[1] > 0, used  # both slots hold a conversation
                # A closed tab frees its slot, and the next tab gets it.
                first = next(p for p in apps if slot_flag(p) == 0)
                await tabs[[slot_flag(p) for p in apps].index(0)].ws.close()
                wait_for(lambda: gone(first), "the first tab's app process to end")
                again = await open_tab(session, served)
                await again.until(drawn, "a new tab's app")
                new = [p for p in served.apps() if p not in apps]
                assert [slot_flag(p) for p in new] == [0]
                for tab in (again, *tabs):
                    await tab.ws.close()

        run(go())
        wait_for(lambda: served.apps() == [], "every app process to end")
        replies = [conversation(f) for f in served.autosave_files()]
        answered = [c for c in replies if len(c) == 2]
        assert len(answered) == 2
        assert answered[0][1]["content"] and answered[0][1] == answered[1][1]
    finally:
        served.close()


def test_slot_flags_are_one_sentence(two_slots):
    msg = one_sentence(
        run_cli("trace", "--server", two_slots.url, "--slot", "2", "-n", "1", "-p", "Hi"),
        "--slot 2",
        "2 slot(s), 0 to 1",
    )
    assert "-np" in msg
    one_sentence(run_cli("trace", "--server", two_slots.url, "--slot", "-1", "-p", "Hi"), "--slot")
    one_sentence(
        run_cli("serve", "--server", two_slots.url, "--slot", "1"), "each tab its own slot"
    )
    dead = f"http://127.0.0.1:{server_port()}"
    res = run_cli("serve", "--server", dead, "--port", str(server_port()))
    err = res.stderr.decode()
    assert res.returncode == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"nothing answers at {dead}" in err  # before any tab, and no port is bound
