"""The worker's stateful tests' settings (profile, bounds, texts)."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


FUZZ_MINUTES = float(os.environ.get("FUZZ_MINUTES", "30"))


BOUNDED = settings(
    max_examples=6,
    stateful_step_count=14,
    derandomize=True,  # a fixed seed in make test
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking here: the failing steps are printed
    suppress_health_check=list(HealthCheck),
    database=None,
)


FUZZ = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
    database=None,
)


TEXTS = ["The cat", "Colors: red, green, blue, red, green", "1 2 3 4 1 2 3", "Once upon"]


COUNTS = {"commands": 0, "examples": 0}


def run_machine(
    machine: type[RuleBasedStateMachine],
    what: str,
    *,
    bounded: settings = BOUNDED,
    fuzz: settings = FUZZ,
    unit: str = "commands",
) -> None:
    """``make test``: ``bounded`` (a fixed seed). ``make fuzz``: rounds of ``fuzz`` for
    FUZZ_MINUTES, then this machine's own counts (the counter starts again for each machine,
    as ``make fuzz`` runs them one after another in one process)."""
    if PROFILE != "fuzz":
        run_state_machine_as_test(machine, settings=bounded)
        return
    COUNTS.update(commands=0, examples=0)
    end = time.monotonic() + FUZZ_MINUTES * 60
    rounds = 0
    while time.monotonic() < end:
        run_state_machine_as_test(machine, settings=fuzz)
        rounds += 1
    print(f"{what}: {rounds} rounds, {COUNTS['examples']} examples, {COUNTS['commands']} {unit}")
