"""GPU offload flags for local models: passed to llama.cpp as its tools take them, and where the
layers and the KV cache live read back from llama.cpp's own log."""

from __future__ import annotations

import json

import llama_cpp

from tests.support.cli import run_cli
from tui.engine import Engine, EngineConfig, Model
from tui.engine.model.offload import Offload, placement


def test_ngl_on_this_build_is_accepted_and_the_header_says_where_layers_live():
    model = Model(offload=Offload(n_gpu_layers=5))
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2))
    try:
        p = eng.placement
        # the oracle: llama.cpp's own answer, and its own log lines
        assert p.gpu_build == bool(llama_cpp.llama_supports_gpu_offload())
        if not p.gpu_build:
            assert p.describe() == (
                "CPU only: -ngl 5 asked, but this llama-cpp-python build has no GPU backend"
            )
            assert p.offloaded is None
            assert [d for d, _ in p.kv_buffers] == ["CPU"]
        else:  # pragma: no cover - a GPU build
            assert p.offloaded is not None and p.offloaded[0] == 5
        assert any(line for line in model.load_log if "model buffer size" in line)
        from tui.engine.observe.memory import memory_report

        notes = memory_report(eng).notes  # the memory tab says it too
        assert any(n.startswith("where llama.cpp put the model: ") for n in notes)
    finally:
        eng.close()
        model.close()


def test_offload_sets_llama_cpps_model_parameters():
    params = llama_cpp.llama_model_default_params()
    off = Offload(n_gpu_layers=7, split_mode="row", tensor_split=[3.0, 1.0], main_gpu=1)
    off.validate()
    off.apply(params)
    assert params.n_gpu_layers == 7
    assert params.split_mode == llama_cpp.LLAMA_SPLIT_MODE_ROW
    assert params.main_gpu == 1
    assert [params.tensor_split[i] for i in range(3)] == [3.0, 1.0, 0.0]


def test_the_placement_reads_llama_cpps_gpu_log_lines():
    """The lines a CUDA build of this llama.cpp writes (their format, from its load_tensors and
    llama_kv_cache), as a GPU machine would log them."""
    model_log = [
        "load_tensors: offloading 30 repeating layers to GPU",
        "load_tensors: offloaded 31/31 layers to GPU",
        "load_tensors:        CUDA0 model buffer size =    92.10 MiB",
        "load_tensors:   CPU_Mapped model buffer size =    28.13 MiB",
    ]
    ctx_log = ["llama_kv_cache:      CUDA0 KV buffer size =    90.00 MiB"]
    p = placement(model_log, ctx_log, Offload(n_gpu_layers=99))
    assert p.offloaded == (31, 31)
    assert p.model_buffers == (("CUDA0", 92.10), ("CPU_Mapped", 28.13))
    assert p.kv_buffers == (("CUDA0", 90.0),)
    if p.gpu_build:  # pragma: no cover - a GPU build
        assert p.describe() == "offloaded 31/31 layers to GPU; KV cache on CUDA0"


def test_gpu_flags_on_the_command_line():
    out = run_cli("trace", "-p", "The cat sat", "-n", "1", "-ngl", "all", "-sm", "none", "-mg", "0")
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout.decode().splitlines()[0])["phase"] == "prefill"
    out = run_cli("trace", "-p", "Hi", "-n", "1", "--no-kv-offload", "-ts", "1,1")
    assert out.returncode == 0, out.stderr.decode()
    for bad, says in (
        (["-ngl", "lots"], "not a number of layers"),
        (["-ts", "a,b"], "not a list like 3,1"),
        (["-sm", "diagonal"], "invalid choice"),
        (["-mg", "-1"], "-mg must be 0 or more"),
    ):
        out = run_cli("trace", "-p", "Hi", "-n", "1", *bad)
        err = out.stderr.decode()
        assert out.returncode == 1 and says in err and "Traceback" not in err, err
