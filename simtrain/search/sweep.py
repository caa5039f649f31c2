"""st.sweep: evaluate a grid of what-ifs; one DataFrame row per point, infeasible rows kept with reasons.

Grid keys are TrainConfig fields (``tp``, ``micro_batch_size``, ``zero_stage``, ...) plus ``nodes``
(the cluster's node count). A point that is bad input (a config that does not validate) or that does
not fit becomes a row with ``feasible=False`` and the reason — the sweep keeps going. With a Dask
``client`` the points are evaluated on its workers (``client.map``); without one, in this process.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from simtrain.errors import SimtrainError, SpecError

__all__ = ["sweep", "grid_points", "evaluate_point"]

RESULT_COLUMNS = ("feasible", "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "memory_bytes",
                  "memory_fits", "bottleneck", "reasons")


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The cartesian product of the grid, in a deterministic order (keys sorted)."""
    keys = sorted(grid)
    for k in keys:
        if not isinstance(grid[k], (list, tuple)) or not grid[k]:
            raise SpecError.one(None, f"grid.{k}", "must be a non-empty list of values")
    return [dict(zip(keys, values, strict=False)) for values in itertools.product(*(grid[k] for k in keys))]


def _failed(point: dict, reason: str) -> dict:
    row = dict(point)
    row.update({c: math.nan for c in RESULT_COLUMNS})
    row.update(feasible=False, memory_fits=False, bottleneck="", reasons=reason)
    return row


def evaluate_point(model, cluster, base_cfg, point: dict, engine: str = "estimate") -> dict:
    """One row: the point's values and the report's headline numbers (never raises for bad points)."""
    from simtrain.estimator import estimate
    from simtrain.specs.train import TrainConfig
    fields = {**base_cfg.model_dump(exclude_unset=True), **{k: v for k, v in point.items() if k != "nodes"}}
    try:
        cfg = TrainConfig.build(None, **fields)
        target = cluster.with_nodes(point["nodes"]) if "nodes" in point else cluster
        if engine != "estimate":
            raise SpecError.one(None, "engine", f"unknown engine {engine!r}; this build has 'estimate'")
        r = estimate(model, target, cfg)
    except (SpecError, SimtrainError, ValueError) as err:
        return _failed(point, str(err))
    row = dict(point)
    mem = r.memory
    row.update(feasible=r.feasible, step_time_s=r.step_time_s, samples_per_s=r.samples_per_s,
               tokens_per_s=r.tokens_per_s, mfu=r.mfu, hfu=r.hfu,
               memory_bytes=mem.total_bytes if mem else math.nan,
               memory_reserved_bytes=mem.reserved_bytes if mem else math.nan, memory_fits=bool(mem and mem.fits),
               bottleneck=r.bottleneck, reasons="; ".join(r.reasons))
    return row


def sweep(model, cluster, cfg, grid: dict[str, list], engine: str = "estimate", client=None):
    """pandas DataFrame, one row per grid point (see module docstring)."""
    import pandas as pd
    points = grid_points(grid)
    if client is None:
        rows = [evaluate_point(model, cluster, cfg, p, engine) for p in points]
    else:
        futures = client.map(evaluate_point, [model] * len(points), [cluster] * len(points),
                             [cfg] * len(points), points, [engine] * len(points), pure=False)
        rows = client.gather(futures)
    return pd.DataFrame(rows)
