"""How many browser tabs one llama-server holds: ``tokenstep serve --server URL`` with the
bundled model, every tab an app process stepping its own slot of one server (``-np N``).

For each N: start llama-server with N slots (``-c`` 2,048 per slot, ``-t 2``) and ``tokenstep
serve`` with a cap of N tabs on the same machine, open N tabs over textual-serve's websocket
protocol and read their screens as textual.js does, and send the same message in all of them
at once. Then read the server's ``/slots`` once a second: each slot's context grows by the
tab's reply, so its growth from second 5 to 35 is that tab's tokens per second, counted by the
server. Also reported: the CPU (in cores) of the server and of the tabs' app processes over the
window, the screen bytes a tab sends, the server's RSS and each tab's proportional memory
(PSS, from the kernel). Run it alone, as ``python -m benchmarks.serve_capacity [N ...]``; it
takes about a minute per N."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from .bench_remote import server_binary, start_server
from .common import load

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = "Write a short poem about the sea."
PER_SLOT_CTX = 2048
TIMEOUT_S = 900.0
WINDOW_S = 35.0  # seconds of replies read per N
WARM_S = 5.0  # the rates are taken from here to the end of the window
THREADS = 2  # llama-server's -t: the whole machine is the class's


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        f = task / "children"
        if f.exists():
            out += [int(c) for c in f.read_text().split()]
    return out


def _mem_kb(pid: int, key: str) -> int:
    """A field of /proc/PID/smaps_rollup (Pss, Rss) in kB, 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _tab(
    session: aiohttp.ClientSession, url: str
) -> tuple[aiohttp.ClientWebSocketResponse, bytearray]:
    ws = await session.ws_connect(f"{url}/ws?width=120&height=40")
    return ws, bytearray()


async def _until(ws: aiohttp.ClientWebSocketResponse, screen: bytearray, needle: bytes) -> float:
    async def read() -> None:
        while needle not in screen:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                screen.extend(msg.data)
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                raise RuntimeError("a tab's socket closed")

    await asyncio.wait_for(read(), TIMEOUT_S)
    return time.monotonic()


async def _slots(session: aiohttp.ClientSession, server: str) -> dict[int, int]:
    """Per slot, the tokens of the last request it took: the tab's context, so its growth is
    the tab's reply (``n_prompt_tokens`` in llama-server's ``/slots``)."""
    async with session.get(server + "/slots") as r:
        return {int(x["id"]): int(x.get("n_prompt_tokens") or 0) for x in await r.json()}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drive(
    url: str, server: str, n: int, serve_pid: int, server_pid: int
) -> dict[str, object]:
    """Open ``n`` tabs, send the message in all, then read the server's slots once a second
    for ``WINDOW_S``: each tab's tokens per second over the window after ``WARM_S``."""
    async with aiohttp.ClientSession() as session:
        t_open = time.monotonic()
        tabs = [await _tab(session, url) for _ in range(n)]
        await asyncio.gather(*(_until(ws, s, b"waiting for a message") for ws, s in tabs))
        opened_s = time.monotonic() - t_open
        t0 = time.monotonic()
        for ws, _ in tabs:
            await ws.send_str(json.dumps(["stdin", MESSAGE + "\r"]))
        series: list[tuple[float, dict[int, int]]] = []
        # Read every tab's screen as a browser does (an unread socket also misses the
        # server's heartbeat, and textual-serve closes it).
        readers = [asyncio.create_task(_until(ws, s, b"\0never")) for ws, s in tabs]
        apps = _children(serve_pid)
        cpu0 = (_cpu_s(server_pid), sum(_cpu_s(p) for p in apps), time.monotonic())
        while time.monotonic() - t0 < WINDOW_S:
            series.append((time.monotonic() - t0, await _slots(session, server)))
            await asyncio.sleep(1.0)
        pss = [_mem_kb(p, "Pss") for p in apps]  # while every tab is open
        wall = time.monotonic() - cpu0[2]
        cpu = (
            (_cpu_s(server_pid) - cpu0[0]) / wall,
            (sum(_cpu_s(p) for p in apps) - cpu0[1]) / wall,
        )
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        screen_mb = sum(len(s) for _, s in tabs) / 1e6
        for ws, _ in tabs:
            await ws.close()
    first = next(i for i, (t, _) in enumerate(series) if t >= WARM_S)
    (ta, a), (tb, b) = series[first], series[-1]
    rates = [(b[k] - a[k]) / (tb - ta) for k in b]
    started = []  # per tab: seconds until its context first grew past its prompt
    for k in b:
        sizes = [(t, snap.get(k, 0)) for t, snap in series]
        prompt = next((v for _, v in sizes if v > 0), 0)
        started.append(next((t for t, v in sizes if prompt and v > prompt), None))
    return {
        "opened_s": opened_s,
        "rates": rates,
        "started": started,
        "pss": pss,
        "cpu": cpu,
        "screen_mb": screen_mb,
    }


def measure(n: int) -> dict[str, object]:
    binary = server_binary()
    if binary is None:
        raise RuntimeError("no llama-server binary (make test builds it)")
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(
            binary, Path(tmp) / "server.log", parallel=n, n_ctx=PER_SLOT_CTX * n, threads=THREADS
        )
        port = _port()
        env = {**os.environ, "TOKENSTEP_AUTOSAVE_DIR": str(Path(tmp) / "autosave")}
        argv = [sys.executable, "-m", "tui", "serve", "--port", str(port), "--max-sessions", str(n)]
        argv += ["--server", url, "--greedy"]
        served = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            assert served.stdout is not None
            for raw in served.stdout:  # the announcement comes once the port is bound
                if b"tokenstep serve:" in raw:
                    break
            got = asyncio.run(_drive(f"http://127.0.0.1:{port}", url, n, served.pid, server.pid))
            pss: list[int] = got["pss"]  # type: ignore[assignment]
            server_rss = _mem_kb(server.pid, "Rss")
        finally:
            served.send_signal(signal.SIGTERM)
            served.wait(120)
            server.terminate()
            server.wait(60)
    rates = sorted(got["rates"])  # type: ignore[arg-type]
    return {
        "tabs": n,
        "tabs_ready_s": round(got["opened_s"], 1),  # type: ignore[arg-type]
        "tok_s_slowest_tab": round(rates[0], 1),
        "tok_s_median_tab": round(rates[len(rates) // 2], 1),
        "tok_s_all_tabs": round(sum(rates), 1),
        # seconds from sending until the last tab's context had grown by 30 tokens
        # seconds from sending until the last tab's reply had begun (1 s resolution)
        "last_tab_replying_s": max((t for t in got["started"] if t is not None), default=None),  # type: ignore[attr-defined]
        "tabs_not_started": sum(t is None for t in got["started"]),  # type: ignore[attr-defined]
        "server_rss_mb": round(server_rss / 1024),
        "cores_server": round(got["cpu"][0], 2),  # type: ignore[index]
        "cores_tabs": round(got["cpu"][1], 2),  # type: ignore[index]
        "screen_mb_per_tab_s": round(got["screen_mb"] / n / WINDOW_S, 3),  # type: ignore[operator]
        "tab_pss_mb": round(sum(pss) / len(pss) / 1024) if pss else None,
        "load": load(),
    }


def main() -> int:
    sizes = [int(a) for a in sys.argv[1:]] or [1, 2, 4, 8, 16, 32]
    for n in sizes:
        print(json.dumps(measure(n)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
