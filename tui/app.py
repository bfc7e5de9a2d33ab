"""The Textual app (placeholder until the stepping TUI lands)."""

from __future__ import annotations

import argparse


def run_app(args: argparse.Namespace) -> int:
    from .engine.errors import TokenstepError

    raise TokenstepError("the interactive app is not built yet; use 'tokenstep trace -p TEXT'.")
