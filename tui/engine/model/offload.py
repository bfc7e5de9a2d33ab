"""GPU offload for a local model: llama.cpp's -ngl, -sm, -ts, -mg and --no-kv-offload, and where
the layers and the KV cache ended up, read from llama.cpp's own log.

llama.cpp logs "offloaded N/M layers to GPU" while it loads the weights, "<device> model buffer
size" for each device that holds weights, and "<device> KV buffer size" when it creates a
context. A CPU-only build (``llama_supports_gpu_offload()`` false) accepts -ngl and offloads
nothing; :func:`placement` then says the build has no GPU backend.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

import llama_cpp

from .errors import TokenstepError

SPLIT_MODES = {
    "none": llama_cpp.LLAMA_SPLIT_MODE_NONE,
    "layer": llama_cpp.LLAMA_SPLIT_MODE_LAYER,
    "row": llama_cpp.LLAMA_SPLIT_MODE_ROW,
}
ALL_LAYERS = 1 << 30  # -ngl all: more layers than any model has

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_MODEL_BUF = re.compile(r"(\S+) model buffer size =\s*([\d.]+) MiB")
_KV_BUF = re.compile(r"(\S+) KV buffer size =\s*([\d.]+) MiB")


@dataclass
class Offload:
    """Where llama.cpp should put the model and the KV cache."""

    n_gpu_layers: int = 0
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0
    kv_offload: bool = True
    _split_buf: ctypes.Array[ctypes.c_float] | None = field(default=None, repr=False)

    def validate(self) -> None:
        if self.split_mode not in SPLIT_MODES:
            raise TokenstepError(f"-sm must be none, layer or row, not {self.split_mode!r}.")
        n_dev = int(llama_cpp.llama_max_devices())
        if self.tensor_split is not None and len(self.tensor_split) > n_dev:
            raise TokenstepError(
                f"-ts gives {len(self.tensor_split)} shares but this llama.cpp handles at most "
                f"{n_dev} devices."
            )
        if self.main_gpu < 0:
            raise TokenstepError(f"-mg must be 0 or more, not {self.main_gpu}.")

    def apply(self, params: llama_cpp.llama_model_params) -> None:
        """Set the model parameters; the tensor-split array lives as long as this object."""
        params.n_gpu_layers = self.n_gpu_layers
        params.split_mode = SPLIT_MODES[self.split_mode]
        params.main_gpu = self.main_gpu
        if self.tensor_split:
            n_dev = int(llama_cpp.llama_max_devices())
            values = self.tensor_split + [0.0] * (n_dev - len(self.tensor_split))
            self._split_buf = (ctypes.c_float * n_dev)(*values)
            params.tensor_split = ctypes.cast(self._split_buf, ctypes.POINTER(ctypes.c_float))  # type: ignore[assignment]

    @property
    def layers_text(self) -> str:
        return "all" if self.n_gpu_layers >= ALL_LAYERS else str(self.n_gpu_layers)


@dataclass(frozen=True)
class Placement:
    """Where the layers, the weights and the KV cache live, in llama.cpp's words."""

    gpu_build: bool
    offloaded: tuple[int, int] | None  # (N, M) from "offloaded N/M layers to GPU"
    model_buffers: tuple[tuple[str, float], ...]  # (device, MiB)
    kv_buffers: tuple[tuple[str, float], ...]
    asked_layers: str  # -ngl as given

    def describe(self) -> str:
        """One line for the header and the memory tab."""
        if not self.gpu_build:
            if self.asked_layers != "0":
                return (
                    f"CPU only: -ngl {self.asked_layers} asked, but this llama-cpp-python build "
                    "has no GPU backend"
                )
            return "CPU only (this llama-cpp-python build has no GPU backend)"
        parts = []
        if self.offloaded is not None:
            parts.append(f"offloaded {self.offloaded[0]}/{self.offloaded[1]} layers to GPU")
        else:
            parts.append("no layer offloaded (-ngl 0)")
        if self.kv_buffers:
            parts.append("KV cache on " + ", ".join(d for d, _ in self.kv_buffers))
        return "; ".join(parts)


def _buffers(pattern: re.Pattern[str], lines: list[str]) -> tuple[tuple[str, float], ...]:
    out: dict[str, float] = {}
    for line in lines:
        m = pattern.search(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return tuple(out.items())


def placement(model_log: list[str], context_log: list[str], offload: Offload) -> Placement:
    off = None
    for line in model_log:
        m = _OFFLOADED.search(line)
        if m:
            off = (int(m.group(1)), int(m.group(2)))
    return Placement(
        gpu_build=bool(llama_cpp.llama_supports_gpu_offload()),
        offloaded=off,
        model_buffers=_buffers(_MODEL_BUF, model_log),
        kv_buffers=_buffers(_KV_BUF, context_log),
        asked_layers=offload.layers_text,
    )
