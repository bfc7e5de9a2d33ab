"""What each stage of the chain did, read off the candidates before and after it: the
penalty on each penalized candidate and why, the repeat DRY matched, the top candidates XTC
removed (or that it did not fire), the temperature dynatemp chose."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .chain_result import MOVES

if TYPE_CHECKING:
    from .chain_result import Stage
    from .sampler_settings import SamplerSettings

__all__ = ["MOVES", "describe"]


def describe(
    st: Stage, before: np.ndarray, after: np.ndarray, s: SamplerSettings, hist: list[int]
) -> None:
    """What a stage did, read off the candidates before and after it."""
    if st.key in MOVES:  # in place, same order: compare position by position
        moved = np.nonzero(before["logit"] != after["logit"])[0]
        st.changed = [
            (int(before["id"][i]), float(before["logit"][i]), float(after["logit"][i]))
            for i in moved.tolist()
        ]
        if st.key == "penalties":
            n = len(hist) if s.repeat_last_n == -1 else s.repeat_last_n
            window = hist[-n:] if n > 0 else []
            counts: dict[int, int] = {}
            for t in window:
                counts[t] = counts.get(t, 0) + 1
            for tok, _, _ in st.changed:
                st.why[tok] = f"seen {counts.get(tok, 0)}× in the last {len(window)}"
        elif st.key == "dry":
            for tok, a, b in st.changed:
                pen = a - b
                if pen > 0 and s.dry_multiplier > 0 and s.dry_base > 1:
                    length = s.dry_allowed_length + round(
                        math.log(pen / s.dry_multiplier) / math.log(s.dry_base)
                    )
                    st.why[tok] = f"would repeat the last {length} tokens (−{pen:.3f})"
        elif st.key == "logit_bias":
            for tok, a, b in st.changed:
                st.why[tok] = f"bias {b - a:+g}"
    elif st.key == "xtc":
        kept = set(after["id"].tolist())
        st.removed = [int(t) for t in before["id"].tolist() if t not in kept]
        st.note = f"removed {len(st.removed)} top" if st.removed else "did not fire"
    elif st.key == "temperature" and s.dynatemp_range > 0 and before.size:
        i = int(np.argmax(np.abs(np.where(np.isfinite(before["logit"]), before["logit"], 0))))
        tok, a = int(before["id"][i]), float(before["logit"][i])
        hit = np.nonzero(after["id"] == tok)[0]
        if hit.size and after["logit"][hit[0]] != 0:
            st.note = f"dynatemp chose T {a / float(after['logit'][hit[0]]):.3f}"
