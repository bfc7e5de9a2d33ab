"""The worker's stateful tests' settings (profile, bounds, texts)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

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
