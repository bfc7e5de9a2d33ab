"""Issue 22: the llama-server the tests start (built by ``make test`` or handed over with
``TOKENSTEP_LLAMA_SERVER``) gets ``--no-repack`` exactly when its own system info lists AMX
kernels, so the remote tests run on a Xeon with AMX too."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.support.llama_server import repack_args, require_binary, server_system_info, start_server
from tests.support.repack import SERVER_AMX, SERVER_EPYC
from tui.engine.model import repack


def fake_server(tmp: Path, line: str) -> Path:
    """A program that prints what llama-server prints at -lv 4 before its model fails to load."""
    path = tmp / "llama-server"
    prefix = "0.00.002.170 I cmn  common_param: " if line else ""
    path.write_text(
        "#!/bin/sh\n"
        "echo '0.00.000.021 I cmn  common_param: verbosity = 4 (adjust with the `-lv N` CLI arg)'\n"
        f"echo '{prefix}{line}'\n"
        "echo \"0.00.004.234 E srv    load_model: failed to load model, '$4'\"\n"
        "exit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_servers_own_system_info_decides(tmp_path: Path) -> None:
    for sub, line, want in (
        ("amx", SERVER_AMX, ("--no-repack",)),
        ("epyc", SERVER_EPYC, ()),
        ("silent", "", ()),  # a server that prints no system info keeps its default
    ):
        (tmp_path / sub).mkdir()
        binary = fake_server(tmp_path / sub, line)
        assert server_system_info(binary) == line
        assert repack_args(binary) == want


def test_llama_perplexity_asks_the_server_of_its_build(tmp_path: Path) -> None:
    """llama-perplexity prints no system info before its load; the llama-server beside it
    (the same ggml libraries) decides for it, as it does on a Xeon with AMX."""
    for sub, line, want in (("amx", SERVER_AMX, ("--no-repack",)), ("epyc", SERVER_EPYC, ())):
        (tmp_path / sub).mkdir()
        fake_server(tmp_path / sub, line)
        silent = tmp_path / sub / "llama-perplexity"
        silent.write_text("#!/bin/sh\nexit 1\n")
        silent.chmod(silent.stat().st_mode | stat.S_IXUSR)
        assert server_system_info(silent) == ""
        assert repack_args(silent) == want


def test_the_real_server_is_started_as_its_system_info_says(tmp_path: Path) -> None:
    binary = require_binary()
    line = server_system_info(binary)
    assert line.startswith("system_info: n_threads = ") and " CPU : " in line
    want = () if repack.decide(line).use_extra_bufts else ("--no-repack",)
    assert repack_args(binary) == want
    server = start_server(tmp_path)
    try:
        argv = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert (b"--no-repack" in argv) == bool(want)
        reply = server.post("/completion", {"prompt": "The cat sat", "n_predict": 2})
        assert reply["tokens_predicted"] == 2  # it decodes (on an AMX CPU too)
    finally:
        server.stop()
    assert os.path.exists(server.log)
