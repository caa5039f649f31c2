"""CPU benches timed as pairs of the same work: fresh pages and the last-level cache, conv layout reorders,
dropout's random draws, and an op's extra cost inside a training step.

Each pair is its own module: :mod:`simtrain.calibrate.bench_fresh_pages` (fresh pages and the
last-level cache, and the pair helpers the others share), :mod:`simtrain.calibrate.bench_conv_layout`
(convolution layout reorders), :mod:`simtrain.calibrate.bench_rng` (dropout's random draws) and
:mod:`simtrain.calibrate.bench_cold_calls` (an op's extra cost inside a step); their names are
re-exported here.
"""

from __future__ import annotations

from simtrain.calibrate.bench_cold_calls import (  # noqa: F401  (re-exported)
    DECAY_GAPS_S,
    EVICT_LLC_MULTIPLE,
    EVICT_MAX_BYTES,
    EVICT_MIN_BYTES,
    FIXED_OP,
    HALF_GAP_GRID_S,
    MIN_REPEATS,
    OPTIMIZER_OPS,
    STEP_GAP_S,
    bench_step_state,
    cold_pairs,
    evict_bytes,
    fit_half_gap,
    fit_step_state,
)
from simtrain.calibrate.bench_conv_layout import (  # noqa: F401  (re-exported)
    activation_bytes,
    bench_conv_layout,
    fit_conv_layout,
)
from simtrain.calibrate.bench_fresh_pages import (  # noqa: F401  (re-exported)
    FRESH_FAULTED_MIN_FRACTION,
    MMAP_THRESHOLD_MAX_BYTES,
    bench_first_touch,
    first_touch_tensor_bytes,
    fit_first_touch,
    fresh_fill,
    last_level_cache_bytes,
    median_pair_rate,
    paired_rows,
    slower_pairs,
)
from simtrain.calibrate.bench_rng import KEEP_PROBABILITY, bench_rng, fit_rng  # noqa: F401  (re-exported)

__all__ = ["MMAP_THRESHOLD_MAX_BYTES", "bench_first_touch", "fresh_fill", "fit_first_touch",
           "first_touch_tensor_bytes", "last_level_cache_bytes", "paired_rows", "median_pair_rate",
           "slower_pairs", "bench_conv_layout", "fit_conv_layout", "activation_bytes", "bench_rng", "fit_rng",
           "KEEP_PROBABILITY", "STEP_GAP_S", "DECAY_GAPS_S", "FIXED_OP", "OPTIMIZER_OPS", "bench_step_state",
           "fit_step_state", "fit_half_gap", "cold_pairs", "HALF_GAP_GRID_S", "evict_bytes",
           "EVICT_LLC_MULTIPLE", "EVICT_MIN_BYTES", "EVICT_MAX_BYTES"]
