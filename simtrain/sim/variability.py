"""Per-device speed variability and stragglers: the model lives in :mod:`simtrain.cost.variability`,
where the closed form's synchronous-step wait (``sync_wait_seconds``) and the goodput simulation
(sim/goodput.py) share it; this module keeps the old import path."""

from simtrain.cost.variability import (
    Variability,
    expected_slowdown,
    sample_step_factors,
    sample_step_factors_brute,
)

__all__ = ["Variability", "expected_slowdown", "sample_step_factors", "sample_step_factors_brute"]
