"""Regenerate screenshots/compare.svg: ``tokenstep compare`` on the bundled model, A with an f16
KV cache and B with q4_0 (``-c 256 -fa on --vs -ctk q4_0 -ctv q4_0``), at its first top-1
flip. Run by ``make screenshots``.

The figures are the run's own, computed on the machine that runs this script (KL and p move a
little with the CPU's kernels)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tui.compare.cli import parse_sides  # noqa: E402
from tui.compare.run import run_compare  # noqa: E402
from tui.compare.screen import CompareApp  # noqa: E402
from tui.trace_cli import config_from_args, settings_from_args  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "screenshots"
SIZE = (120, 40)
TEXT = (
    "The old lighthouse stood at the edge of the cliff, and every night its keeper climbed the "
    "hundred and twelve steps to light the lamp. Ships passing in the dark saw the beam sweep "
    "across the water and knew where the rocks were. One winter the keeper fell ill, and his "
    "daughter, who had watched him for years, climbed the steps in his place."
)
ARGV = ["-p", TEXT, "-c", "256", "-fa", "on", "--vs", "-ctk", "q4_0", "-ctv", "q4_0"]


async def shot() -> None:
    a, b, differs = parse_sides(ARGV)
    configs = (config_from_args(a), config_from_args(b))
    settings = (settings_from_args(a), settings_from_args(b))
    result = run_compare(a, b, configs, settings, differs)
    app = CompareApp(result)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("n")  # the first position where the top-1s differ
        await pilot.pause(0.3)
        svg = app.export_screenshot(
            title="tokenstep compare -c 256 -fa on --vs -ctk q4_0 -ctv q4_0"
        )
    (OUT / "compare.svg").write_text(svg, encoding="utf-8")
    print("wrote screenshots/compare.svg")


def main() -> int:
    OUT.mkdir(exist_ok=True)
    asyncio.run(shot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
