"""Issue 22: the chosen ``use_extra_bufts`` reaches ``llama_model_params`` at every entry point
(the app, ``trace``, ``verify``, ``--resume``), read in a child process from the very struct
handed to ``llama_model_load_from_file``. An AMX machine is played by replacing the system
info llama.cpp reports (and, for the load-log check, by the line llama.cpp logs there), and a
machine without AMX by an AMD EPYC's line. Where the real llama.cpp has AMX kernels (a
Sapphire Rapids Xeon), a load with extra buffers would crash at its first decode (llama.cpp
#20824), so the child ends there with exit 0 and says so: the load is what is checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.repack import EPYC_AVX512, XEON_AMX
from tests.support.resume_files import write_resume
from tui.engine import default_model_path

CHILD = r"""
import os, sys
import llama_cpp

from tui.engine.model import llama_log, repack

real_amx = not repack.decide(llama_cpp.llama_print_system_info().decode()).use_extra_bufts
fake = os.environ.get("FAKE_SYSTEM_INFO")
if fake is not None:
    llama_cpp.llama_print_system_info = lambda: fake.encode()
log_line = llama_log._on_log
if real_amx and fake is not None and repack.decide(fake).use_extra_bufts:
    # a machine without AMX played on one with it: its load log's AMX buffer is not shown
    def hide_amx(level, text, user):
        if not (text and b"AMX model buffer" in text):
            log_line(level, text, user)
    llama_log._on_log = hide_amx
real = llama_cpp.llama_model_load_from_file
real_decode = llama_cpp.llama_decode
last_load = {"extra": False}


def decode(ctx, batch):
    if real_amx and last_load["extra"]:
        print("STOP before the first decode: AMX kernels with extra buffers", file=sys.stderr,
              flush=True)
        os._exit(0)
    return real_decode(ctx, batch)


def spy(path, params):
    print(f"LOAD vocab_only={int(params.vocab_only)} use_extra_bufts={int(params.use_extra_bufts)}",
          file=sys.stderr, flush=True)
    if not params.vocab_only:
        last_load["extra"] = bool(params.use_extra_bufts)
    ptr = real(path, params)
    if os.environ.get("FAKE_AMX_LOG") and params.use_extra_bufts and not params.vocab_only:
        # the line llama.cpp logs on an AMX machine
        log_line(2, b"load_tensors:          AMX model buffer size =    64.50 MiB\n", None)
    return ptr


llama_cpp.llama_model_load_from_file = spy
llama_cpp.llama_decode = decode
if sys.argv[1] == "app":  # the whole start-up path, with the screen's event loop left out
    from tui.app import TokenstepApp
    TokenstepApp.run = lambda self, *a, **k: print("NOTICE", self.worker.state.notice)
    TokenstepApp.quit_now = True
from tui.cli import main
sys.exit(main(sys.argv[2:]))
"""

ENTRY_POINTS = {
    "app": ("app", "-c", "512", "-t", "1"),
    "trace": ("cli", "trace", "-p", "The cat sat", "-n", "2", "--temp", "0", "-t", "1"),
    "verify": ("cli", "verify", "-p", "The cat sat", "-n", "1", "-t", "1", "--no-replay"),
    "resume": ("app", "--resume", "{resume}", "-t", "1"),
}


def child(tmp: Path, argv: tuple[str, ...], **env: str) -> tuple[list[int], str]:
    """Run an entry point; the use_extra_bufts of each weight load (vocab-only probes left
    out) and the output."""
    resume = write_resume(tmp / "s.jsonl", default_model_path())
    args = [a.replace("{resume}", str(resume)) for a in argv]
    full = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENSTEP_AUTOSAVE_DIR": str(tmp / "auto")}
    full.update(env)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True,
        timeout=300,
        cwd=tmp,
        env=full,
        stdin=subprocess.DEVNULL,
    )
    out = res.stdout.decode("utf-8", "replace") + res.stderr.decode("utf-8", "replace")
    assert res.returncode == 0, out[-3000:]
    loads = [
        int(m.group(2))
        for m in re.finditer(r"LOAD vocab_only=(\d) use_extra_bufts=(\d)", out)
        if m.group(1) == "0"
    ]
    return loads, out


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_amx_system_info_loads_without_extra_buffers(tmp_path: Path, entry: str) -> None:
    loads, out = child(tmp_path, ENTRY_POINTS[entry], FAKE_SYSTEM_INFO=XEON_AMX)
    assert loads == [0], out[-2000:]
    if entry in ("app", "resume"):  # the app says which and why, in its first notice
        assert "NOTICE Repack off: this llama.cpp has AMX kernels (AMX_INT8 = 1)" in out


def test_the_flags_override_at_each_entry_point(tmp_path: Path) -> None:
    for entry, argv in ENTRY_POINTS.items():
        forced, out = child(tmp_path, (*argv, "--repack"), FAKE_SYSTEM_INFO=XEON_AMX)
        assert forced == [1], (entry, out[-2000:])
        off, out = child(tmp_path, (*argv, "-nr"), FAKE_SYSTEM_INFO=EPYC_AVX512)
        assert off == [0], (entry, out[-2000:])


def test_without_amx_llama_cpps_default_stays_on(tmp_path: Path) -> None:
    """System info without AMX: extra buffers on, as llama.cpp's default, and the app says
    nothing about them."""
    for entry in ("app", "trace"):
        loads, out = child(tmp_path, ENTRY_POINTS[entry], FAKE_SYSTEM_INFO=EPYC_AVX512)
        assert loads == [1], out[-2000:]
        assert "Repack" not in out


def test_an_amx_buffer_in_the_load_log_reloads_without_them(tmp_path: Path) -> None:
    """System info without AMX, but llama.cpp's load log names an AMX buffer: the weights are
    loaded again without extra buffers before the first decode (and --repack keeps them)."""
    no_amx = {"FAKE_AMX_LOG": "1", "FAKE_SYSTEM_INFO": EPYC_AVX512}
    loads, out = child(tmp_path, ENTRY_POINTS["trace"], **no_amx)
    assert loads == [1, 0], out[-2000:]
    assert '"step": 1' in out  # and it decoded
    loads, out = child(tmp_path, (*ENTRY_POINTS["trace"], "--repack"), **no_amx)
    assert loads == [1], out[-2000:]


ORACLE = r"""
import os, sys
import llama_cpp
llama_cpp.llama_print_system_info = lambda: os.environ["FAKE_SYSTEM_INFO"].encode()
import tests.conftest
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print("ORACLE", int(llm.model_params.use_extra_bufts))
"""


def test_the_tests_llama_oracle_loads_as_tokenstep_does(tmp_path: Path) -> None:
    """llama-cpp-python's Llama has no use_extra_bufts argument: with the tests' conftest
    loaded, its model params carry tokenstep's choice (off on an AMX build)."""
    for line, want in ((XEON_AMX, "ORACLE 0"), (EPYC_AVX512, "ORACLE 1")):
        res = subprocess.run(
            [sys.executable, "-c", ORACLE, str(default_model_path())],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "FAKE_SYSTEM_INFO": line},
        )
        assert res.returncode == 0, res.stderr[-2000:]
        assert want in res.stdout
