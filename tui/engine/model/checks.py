"""Type checks for a setting's value, shared by the command line and saved session files.

A flag value is already a number or a string when argparse hands it over; a field read from a
session file can be anything JSON holds (NaN, Infinity, a string, a list, ``true``). These
checks run first in :meth:`SamplerSettings.validate` and :meth:`EngineConfig.validate`, so a
wrong type is one sentence naming the field instead of a ``TypeError`` later (``"hot" < 0``)
or a sampler built from ``top_k = 2.5``. ``name`` is how the field is called where it came
from: ``--temp`` on the command line, ``settings.temp`` in a session file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .errors import TokenstepError

Namer = Callable[[str], str]


def shown(value: Any) -> str:
    """A value as JSON would write it, short (it may be 200 kB of text from a file)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "…"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return str(value)


def finite(value: Any, name: str) -> None:
    """A real number that is not NaN or ±infinity (every comparison with NaN is false, so a
    range check alone would let it through)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenstepError(f"{name} must be a number, not {shown(value)}.")
    if not math.isfinite(value):
        raise TokenstepError(f"{name} must be a finite number, not {shown(value)}.")


def whole(value: Any, name: str) -> None:
    """An integer (2.5 and 3.0 are refused, as the command line's int flags refuse them)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenstepError(f"{name} must be a whole number, not {shown(value)}.")


def flag(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise TokenstepError(f"{name} must be true or false, not {shown(value)}.")


def text(value: Any, name: str) -> None:
    if not isinstance(value, str):
        raise TokenstepError(f"{name} must be a string, not {shown(value)}.")
