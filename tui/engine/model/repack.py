"""Extra buffer types (``llama_model_params.use_extra_bufts``, llama.cpp's ``--repack`` /
``--no-repack``): on or off, decided from what llama.cpp itself reports.

With extra buffers on (llama.cpp's default), the CPU backend may move a weight into a buffer of
its own, in a layout its matmul kernels read faster:

- ``CPU_REPACK``: on x86 (AVX2 and up) only Q4_0, Q4_K, IQ4_NL, MXFP4 and Q2_K are repacked;
  Q4_1 (the bundled SmolLM2) and Q8_0 never are: its load log says "cannot be used with
  preferred buffer type CPU_REPACK, using CPU instead" for all 273 tensors, and the model sits in
  one ``CPU_Mapped`` buffer of 92.10 MiB either way. On ARM (NEON, i8mm, SVE) and with KleidiAI
  more types are repacked and the gain is larger.
- ``AMX``: when ggml was compiled with ``__AMX_INT8__`` (pip builds llama-cpp-python with
  ``-march=native``, so on every Xeon since Sapphire Rapids), Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K
  and IQ4_XS weights go into an ``AMX`` buffer, and ``ggml_backend_amx_mul_mat`` faults at
  ``ldtilecfg`` on the first decode (llama.cpp #20824: tile permission is asked on one thread
  only, the OpenMP workers fault). llama.cpp's own workaround is ``--no-repack``.

So the default here is off exactly when this llama.cpp has AMX kernels (``AMX_INT8 = 1`` in
``llama_print_system_info()``, or an "AMX model buffer" in its load log), and llama.cpp's
default (on) everywhere else. The decision is pure (strings in, a choice out) so it is tested
on system-info strings and load logs recorded on other machines.
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
