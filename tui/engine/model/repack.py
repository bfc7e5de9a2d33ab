"""Extra buffer types (``use_extra_bufts``, llama.cpp's ``--repack`` / ``--no-repack``), decided
from what llama.cpp itself reports.

With them on (llama.cpp's default) the CPU backend may move a weight into a layout its matmul
reads faster. ``CPU_REPACK`` on x86 takes only Q4_0, Q4_K, IQ4_NL, MXFP4 and Q2_K: the bundled
Q4_1 SmolLM2 logs "cannot be used with preferred buffer type CPU_REPACK" for all 273 tensors
and sits in one 92.10 MiB ``CPU_Mapped`` buffer either way (ARM and KleidiAI repack more).
``AMX`` (ggml built with ``__AMX_INT8__``, so ``-march=native`` on Sapphire Rapids and later)
takes Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K and IQ4_XS, and ``ggml_backend_amx_mul_mat`` faults
at ``ldtilecfg`` on the first decode (llama.cpp #20824: tile permission is asked on one thread
only); llama.cpp's workaround is ``--no-repack``. So the default is off exactly when llama.cpp
has AMX kernels (``AMX_INT8 = 1`` in its system info, or an "AMX model buffer" in its load
log), on elsewhere; the decision is pure, tested on recorded system infos and load logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

AMX_ISSUE = "llama.cpp #20824"
_AMX_BUFFER = re.compile(r"\bAMX model buffer size\s*=\s*([\d.]+) MiB")


def features(system_info: str) -> dict[str, str]:
    """``llama_print_system_info()`` as a dict: "CPU : SSE3 = 1 | AVX2 = 1 | " gives
    {"SSE3": "1", "AVX2": "1"}. Also takes llama-server's "system_info: n_threads = 2 / 2 |
    CPU : ..." line; a backend's name before " : " is dropped."""
    out: dict[str, str] = {}
    for part in system_info.split("|"):
        part = part.rsplit(" : ", 1)[-1].strip()
        key, eq, value = part.partition(" = ")
        if eq and key and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def has_amx(system_info: str) -> bool:
    """True when this llama.cpp was compiled with AMX kernels (``AMX_INT8 = 1``)."""
    return features(system_info).get("AMX_INT8", "0") not in ("", "0")


def amx_buffer_mib(load_log: Iterable[str]) -> float | None:
    """MiB of weights llama.cpp put in an AMX buffer ("AMX model buffer size = 67.50 MiB" in
    its load log), or None when there is none."""
    total = None
    for line in load_log:
        m = _AMX_BUFFER.search(line)
        if m:
            total = (total or 0.0) + float(m.group(1))
    return total


@dataclass(frozen=True)
class RepackChoice:
    """Whether the model is loaded with extra buffer types, and why, in one line."""

    use_extra_bufts: bool
    reason: str  # "repack off: this llama.cpp has AMX kernels (AMX_INT8 = 1), ..."
    amx: bool  # this llama.cpp has AMX kernels (compiled in, or an AMX buffer was made)
    asked: bool | None  # --repack (True), --no-repack (False), neither (None)

    @property
    def notable(self) -> bool:
        """Worth a line at start-up: off where llama.cpp would have it on, or forced on over
        the crashing AMX kernels."""
        return not self.use_extra_bufts or (self.amx and self.asked is True)


def decide(
    system_info: str, load_log: Iterable[str] | None = None, flag: bool | None = None
) -> RepackChoice:
    """Extra buffers on or off. ``flag`` is the user's --repack (True) / --no-repack (False);
    with neither, off only when llama.cpp reports AMX kernels, on (its default) elsewhere."""
    compiled = has_amx(system_info)
    amx_mib = amx_buffer_mib(load_log or ())
    amx = compiled or amx_mib is not None
    if compiled:
        why = "this llama.cpp has AMX kernels (AMX_INT8 = 1)"
    elif amx_mib is not None:
        why = f"llama.cpp put {amx_mib:.2f} MiB of weights in an AMX buffer (its load log)"
    else:
        why = "this llama.cpp has no AMX kernels"
    crash = f"which crash on the first decode ({AMX_ISSUE})"
    if flag is True:
        if amx:
            reason = f"repack on: --repack asked for it, but {why}, {crash} unless fixed"
        else:
            reason = "repack on: --repack (llama.cpp's default too)"
        return RepackChoice(True, reason, amx, flag)
    if flag is False:
        reason = "repack off: --no-repack asked for it (llama.cpp's default is on)"
        return RepackChoice(False, reason, amx, flag)
    if amx:
        reason = f"repack off: {why}, {crash}; --repack turns them on"
        return RepackChoice(False, reason, amx, flag)
    reason = f"repack on (llama.cpp's default): {why}; --no-repack turns extra buffers off"
    return RepackChoice(True, reason, amx, flag)
