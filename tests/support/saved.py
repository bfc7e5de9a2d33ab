"""What two saved sessions of the same run share: the records without their wall times."""

from __future__ import annotations

from typing import Any


def untimed(obj: Any) -> Any:
    """A saved record without what differs run to run on the same data: wall times."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if not k.endswith("_ms") and k != "ms"}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj
