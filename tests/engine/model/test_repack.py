"""Issue 22: extra buffers (``use_extra_bufts``, llama.cpp's --repack / --no-repack) are off by
default exactly where this llama.cpp has the AMX kernels that crash on the first decode
(llama.cpp #20824), and on (llama.cpp's default) everywhere else. The decision is pure: it is
checked here on system-info strings and load logs of other machines, both ways, and with the
flags overriding it."""

from __future__ import annotations

import json

import llama_cpp
import pytest

from tests.support.cli import run_cli
from tests.support.repack import EPYC_AVX512, SERVER_AMX, SERVER_EPYC, XEON_AMX
from tui.args import parse
from tui.engine.model import repack
from tui.engine.model.model import system_info

# An older x86 (AVX2 only) and ARM machines: NEON with i8mm, and Apple's Metal build, whose
# line starts with the Metal backend's features.
HASWELL = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
GRAVITON = (
    "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | SVE = 1 | DOTPROD = 1 | "
    "SVE_CNT = 32 | OPENMP = 1 | REPACK = 1 | "
)
APPLE = (
    "Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | "
    "LLAMAFILE = 1 | ACCELERATE = 1 | REPACK = 1 | "
)
# A CUDA build on an AMX Xeon: the CUDA backend first, AMX in the CPU backend's part.
CUDA_AMX = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | " + XEON_AMX

# Load logs: this machine's (the bundled Q4_1 model, extra buffers on: nothing is repacked) and
# an AMX machine's, where llama.cpp puts the Q4_1 matmul weights in an AMX buffer.
LOG_EPYC = [
    "done_getting_tensors: tensor 'token_embd.weight' (q8_0) (and 272 others) cannot be used "
    "with preferred buffer type CPU_REPACK, using CPU instead",
    "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
]
LOG_AMX = [
    "load_tensors:          AMX model buffer size =    64.50 MiB",
    "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
]
LOG_ARM_REPACK = ["load_tensors:   CPU_REPACK model buffer size =    60.75 MiB"]


def test_this_machines_own_line_parses() -> None:
    """The parser reads llama.cpp's real line here (no AMX on this CPU's build)."""
    line = system_info()
    assert line == llama_cpp.llama_print_system_info().decode().strip()
    feats = repack.features(line)
    assert feats, line
    assert all(v for v in feats.values())
    assert repack.has_amx(line) == ("AMX_INT8 = 1" in line)


@pytest.mark.parametrize(
    "line", [XEON_AMX, CUDA_AMX, SERVER_AMX], ids=["xeon", "cuda+xeon", "llama-server"]
)
def test_amx_kernels_turn_extra_buffers_off(line: str) -> None:
    choice = repack.decide(line)
    assert choice.use_extra_bufts is False and choice.amx and choice.notable
    assert choice.reason == (
        "repack off: this llama.cpp has AMX kernels (AMX_INT8 = 1), which crash on the first "
        "decode (llama.cpp #20824); --repack turns them on"
    )


@pytest.mark.parametrize(
    "line",
    [EPYC_AVX512, HASWELL, GRAVITON, APPLE, SERVER_EPYC, ""],
    ids=["epyc-avx512", "avx2", "arm-neon", "apple-metal", "llama-server", "empty"],
)
def test_elsewhere_llama_cpps_default_stays(line: str) -> None:
    """x86 with AVX-512 but no AMX, AVX2, ARM: extra buffers on, as llama.cpp has them."""
    choice = repack.decide(line)
    assert choice.use_extra_bufts is True and not choice.amx and not choice.notable
    assert choice.reason.startswith("repack on (llama.cpp's default): this llama.cpp has no AMX")


def test_features_keep_each_backends_values() -> None:
    assert repack.features(GRAVITON)["SVE_CNT"] == "32"
    assert repack.features(CUDA_AMX)["ARCHS"] == "890"
    assert repack.features(SERVER_AMX)["AMX_INT8"] == "1"
    assert not repack.has_amx(XEON_AMX.replace("AMX_INT8 = 1", "AMX_INT8 = 0"))


def test_an_amx_buffer_in_the_load_log_turns_them_off() -> None:
    """A build whose system info does not say AMX but whose load made an AMX buffer."""
    assert repack.amx_buffer_mib(LOG_AMX) == pytest.approx(64.5)
    choice = repack.decide(EPYC_AVX512, LOG_AMX)
    assert choice.use_extra_bufts is False and choice.amx
    assert "64.50 MiB of weights in an AMX buffer" in choice.reason
    for log in (LOG_EPYC, LOG_ARM_REPACK, []):  # CPU_REPACK and CPU_Mapped are no AMX
        assert repack.amx_buffer_mib(log) is None
        assert repack.decide(EPYC_AVX512, log).use_extra_bufts is True
        assert repack.decide(GRAVITON, log).use_extra_bufts is True


@pytest.mark.parametrize("line", [XEON_AMX, EPYC_AVX512, GRAVITON])
def test_the_flags_override_both_ways(line: str) -> None:
    on, off = repack.decide(line, flag=True), repack.decide(line, flag=False)
    assert on.use_extra_bufts is True and off.use_extra_bufts is False
    assert off.reason == "repack off: --no-repack asked for it (llama.cpp's default is on)"
    assert off.notable
    if repack.has_amx(line):  # forced on over the crashing kernels: said, as a warning
        assert on.notable and "crash on the first decode (llama.cpp #20824)" in on.reason
    else:
        assert not on.notable and on.reason == "repack on: --repack (llama.cpp's default too)"
    assert repack.decide(EPYC_AVX512, LOG_AMX, flag=True).use_extra_bufts is True


def test_the_flags_parse_with_llama_cpps_names() -> None:
    for cmd in ([], ["trace", "-p", "x"], ["verify", "-p", "x"], ["info"]):
        assert parse([*cmd])[1].repack is None
        assert parse([*cmd, "--repack"])[1].repack is True
        assert parse([*cmd, "--no-repack"])[1].repack is False
        assert parse([*cmd, "-nr"])[1].repack is False
        assert parse([*cmd, "-nr", "--repack"])[1].repack is True  # the last one wins
    # serve: the flag is the app's, and reaches each tab's app unchanged
    served = parse(["serve", "--port", "8123", "-nr", "-c", "512"])[1]
    assert served.app_argv == ["-nr", "-c", "512"]
    assert parse(served.app_argv)[1].repack is False


def test_repack_with_server_is_one_sentence() -> None:
    res = run_cli("trace", "--server", "http://127.0.0.1:9", "--no-repack", "-p", "hi")
    assert res.returncode == 1 and res.stderr.count(b"\n") == 1
    assert b"the server loads its own model (pass --no-repack to llama-server)" in res.stderr


def test_version_and_info_print_the_system_info_and_the_choice() -> None:
    line = system_info()
    want = repack.decide(line).reason
    ver = run_cli("--version")
    assert ver.returncode == 0, ver.stderr
    lines = ver.stdout.decode().splitlines()
    assert lines[0].startswith("tokenstep 0.") and "llama-cpp-python 0.3.36" in lines[0]
    assert lines[1] == f"llama.cpp: {line}" and "CPU : " in lines[1]
    assert lines[2] == want
    text = run_cli("info")
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    assert f"\nllama.cpp: {line}\n{want}.\n" in out
    js = run_cli("info", "--json", "--no-repack")
    data = json.loads(js.stdout)
    assert data["system_info"] == line
    assert data["repack"] == {
        "use_extra_bufts": False,
        "reason": "repack off: --no-repack asked for it (llama.cpp's default is on)",
    }
