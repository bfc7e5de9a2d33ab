"""The surprise map's colours and legend: each token's background says how expected it was.

p and p′ use the same bands (a token the model gave under 1% stands out in red); entropy
uses its own (a step with many likely tokens is violet). A token with nothing known (the
first one, or a prompt decoded with the map off) keeps its usual look. Key ``u`` cycles the
scale (off, p, p′, entropy).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from ..worker.surprise import SurpriseView
from .common import DIM, fmt_bytes

# (lower bound, background, label), checked from the top
P_BANDS: tuple[tuple[float, str, str], ...] = (
    (0.5, "#1f4d2b", "≥0.5"),
    (0.1, "#4d4a1f", "≥0.1"),
    (0.01, "#5a3418", "≥0.01"),
    (0.0, "#6b1d1d", "<0.01"),
)
H_BANDS: tuple[tuple[float, str, str], ...] = (
    (5.0, "#5a1d6b", "≥5 bits"),
    (3.0, "#3f2a6b", "≥3"),
    (1.0, "#263f6b", "≥1"),
    (0.0, "#1d2f3a", "<1"),
)
NAMES = {"p": "p (raw logits)", "p'": "p′ (after the chain)", "entropy": "entropy of its step"}


def band(value: float, bands: tuple[tuple[float, str, str], ...]) -> str:
    for lo, colour, _ in bands:
        if value >= lo:
            return colour
    return bands[-1][1]


def token_style(value: tuple[float, float | None, float] | None, scale: str) -> Style | None:
    """The background for one token under ``scale``; None when the map is off or the value
    is not known (a prompt token has no p′: no sampler chain ran for it)."""
    if value is None or scale == "off":
        return None
    p, p_final, entropy = value
    if scale == "p":
        return Style(bgcolor=band(p, P_BANDS))
    if scale == "p'":
        return None if p_final is None else Style(bgcolor=band(p_final, P_BANDS))
    return Style(bgcolor=band(entropy, H_BANDS))


def legend(sv: SurpriseView) -> Text:
    """One line: the scale shown, its bands, the prompt's perplexity and what scoring cost."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if sv.scale == "off":
        return t
    t.append(f"surprise · {NAMES[sv.scale]}", Style(bold=True))
    if sv.prompt_ppl is not None:
        t.append(f" · prompt ppl {sv.prompt_ppl:.2f}", Style(bold=True))
        t.append(f" ({sv.prompt_scored}/{sv.prompt_tokens} tokens) ", DIM)
    elif sv.scores_prompts:
        t.append(" · prompt not scored (the next one is) ", DIM)
    else:
        t.append(" · prompts are not scored over llama-server ", DIM)
    for _, colour, label in H_BANDS if sv.scale == "entropy" else P_BANDS:
        t.append(f" {label} ", Style(bgcolor=colour))
    if sv.scored_rows:
        t.append(
            f" cost: {sv.scored_rows:,} extra logits rows, {fmt_bytes(sv.extra_bytes)}, "
            f"{sv.extra_macs / 1e9:.2f} G multiply-adds",
            DIM,
        )
    return t
