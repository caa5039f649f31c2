"""One sweep point → one row: the grid, its checks, the point key, and the evaluation that never raises.

A row holds the point's input values, ``point_key`` (a stable hash of those values: what resume
matches on), the report's headline numbers, the time breakdown (``time_<part>_s``), and — for a
point that could not be evaluated or does not fit — ``feasible=False`` with ``status`` and ``reasons``:

* ``ok`` — evaluated and feasible;
* ``infeasible`` — evaluated, but the layout does not fit or does not divide (the report's reasons);
* ``invalid`` — bad input: a config that fails validation, a node count that is not a whole number;
* ``error`` — anything else raised while evaluating (or a lost Dask chunk); a resumed sweep retries it.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import numbers
from typing import Any

from simtrain.errors import SimtrainError, SpecError
from simtrain.report.step_report import BREAKDOWN_KEYS

__all__ = ["RESULT_COLUMNS", "BREAKDOWN_COLUMNS", "STATUSES", "MAX_GRID_POINTS", "MAX_AXIS_VALUES", "check_grid", "grid_points", "point_key",
           "evaluate_point", "evaluate_chunk", "failed_row", "target_cluster"]

#: the report parts that get a ``time_<part>_s`` column
_BREAKDOWN = BREAKDOWN_KEYS
BREAKDOWN_COLUMNS = tuple(f"time_{k}_s" for k in _BREAKDOWN)

RESULT_COLUMNS = ("feasible", "status", "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu",
                  "memory_bytes", "memory_reserved_bytes", "memory_fits", "bottleneck", "devices_count",
                  *BREAKDOWN_COLUMNS, "reasons", "warnings")

STATUSES = ("ok", "infeasible", "invalid", "error")

#: the most points one sweep takes (its keys and codes are held in memory: ~100 B a point) and the most
#: values of one axis; above them the grid is refused before anything is evaluated
MAX_GRID_POINTS = 5_000_000
MAX_AXIS_VALUES = 100_000

#: grid keys that are not TrainConfig fields
_EXTRA_KEYS = ("nodes",)


def _allowed_keys() -> list[str]:
    from simtrain.specs.train import TrainConfig
    return sorted(TrainConfig.model_fields) + list(_EXTRA_KEYS)


def _plain(value: Any) -> Any:
    """NumPy scalars as Python ones, so that keys and Parquet types do not depend on where a value
    came from (``np.int64(2)`` and ``2`` are the same point)."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if hasattr(value, "item") and isinstance(value, numbers.Number):
        return value.item()
    return value


def check_grid(grid) -> dict[str, list]:
    """The grid as ``{key: [values]}``; a :class:`SpecError` (naming ``grid.<key>``) for an unknown
    key — with the nearest known one — a value list that is empty or not a list, or a repeated value.
    Runs before anything is evaluated: a misspelt key must not turn every row into "infeasible"."""
    if not isinstance(grid, dict) or not grid:
        raise SpecError.one(None, "grid", "must be a non-empty mapping of key → list of values")
    allowed = _allowed_keys()
    out = {}
    for key, values in grid.items():
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise SpecError.one(None, f"grid.{key}", f"unknown key {key!r}{hint} (keys are TrainConfig "
                                "fields and 'nodes')")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise SpecError.one(None, f"grid.{key}", f"must be a list of values, got {type(values).__name__}")
        values = [_plain(v) for v in itertools.islice(values, MAX_AXIS_VALUES + 1)]
        if not values:
            raise SpecError.one(None, f"grid.{key}", "must be a non-empty list of values")
        if len(values) > MAX_AXIS_VALUES:
            raise SpecError.one(None, f"grid.{key}", f"has more than {MAX_AXIS_VALUES:,} values")
        seen: set[str] = set()  # linear in the axis (a list's count() made 60,000 values take 20 s)
        for v in values:
            _check_value(key, v)
            c = _canonical(v)
            if c in seen:
                raise SpecError.one(None, f"grid.{key}", f"value {v!r} appears more than once")
            seen.add(c)
        out[key] = values
    points = math.prod(len(v) for v in out.values())
    if points > MAX_GRID_POINTS:
        sizes = " × ".join(f"{len(v)} {k}" for k, v in sorted(out.items()))
        raise SpecError.one(None, "grid", f"has {points:,} points ({sizes}), more than the {MAX_GRID_POINTS:,} one "
                            "sweep evaluates: narrow an axis or split the grid into several sweeps")
    return out


def _check_value(key: str, value) -> None:
    """A value the engines and the Parquet file can hold: integers within 64 bits, floats finite."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        raise SpecError.one(None, f"grid.{key}", f"value {value} does not fit a 64-bit integer")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError.one(None, f"grid.{key}", f"value {value!r} is not a finite number")


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The cartesian product of the grid, in a deterministic order (keys sorted, values as given)."""
    keys = sorted(grid)
    for k in keys:
        if isinstance(grid[k], (str, bytes)) or not hasattr(grid[k], "__iter__") or not list(grid[k]):
            raise SpecError.one(None, f"grid.{k}", "must be a non-empty list of values")
    lists = [[_plain(v) for v in grid[k]] for k in keys]
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*lists)]


def _canonical(value: Any) -> str:
    # type-tagged so that 1, 1.0, True and "1" are four different points
    return json.dumps([type(value).__name__, value], default=str)


def point_key(point: dict[str, Any]) -> str:
    """A stable 16-hex-digit key of the point's values (SHA-256 of a canonical JSON text): the same
    point gets the same key in every process and every run, which is what resume skips on."""
    text = json.dumps({k: _canonical(_plain(v)) for k, v in sorted(point.items())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def failed_row(point: dict, reason: str, status: str = "invalid") -> dict:
    """The row of a point that produced no report: NaN numbers, ``feasible=False`` and the reason."""
    row = dict(point)
    row.update({c: math.nan for c in RESULT_COLUMNS})
    row.update(feasible=False, status=status, memory_fits=False, bottleneck="", devices_count=None,
               reasons=reason, warnings="")
    return row


def target_cluster(cluster, point: dict):
    """The cluster of the point's ``nodes`` (the cluster itself without one); SpecError for a bad count."""
    if "nodes" not in point:
        return cluster
    nodes = point["nodes"]
    if isinstance(nodes, bool) or not isinstance(nodes, numbers.Integral) or nodes < 1:
        raise SpecError.one(None, "nodes", f"{nodes!r} is not a whole number of nodes >= 1")
    return cluster.with_nodes(int(nodes))


def _report_row(point: dict, r) -> dict:
    row = dict(point)
    mem = r.memory
    row.update(feasible=bool(r.feasible), status="ok" if r.feasible else "infeasible",
               step_time_s=r.step_time_s, samples_per_s=r.samples_per_s, tokens_per_s=r.tokens_per_s,
               mfu=r.mfu, hfu=r.hfu, memory_bytes=mem.total_bytes if mem else math.nan,
               memory_reserved_bytes=mem.reserved_bytes if mem else math.nan, memory_fits=bool(mem and mem.fits),
               bottleneck=r.bottleneck, devices_count=r.devices_count, reasons="; ".join(r.reasons),
               warnings="; ".join(getattr(r, "warnings", ())))
    for part, column in zip(_BREAKDOWN, BREAKDOWN_COLUMNS, strict=True):
        row[column] = float(r.time_breakdown_s.get(part, 0.0))
    return row


def _point_inputs(cluster, base_cfg, point: dict):
    """(config, cluster, problems) of a point; both checked, so that a row names every bad value."""
    from simtrain.specs.train import TrainConfig
    fields = {**base_cfg.model_dump(exclude_unset=True), **{k: v for k, v in point.items() if k != "nodes"}}
    cfg = target = None
    problems = []
    try:
        cfg = TrainConfig.build(None, **fields)
    except (SpecError, SimtrainError, ValueError) as err:
        problems.append(str(err))
    try:
        target = target_cluster(cluster, point)
    except (SpecError, SimtrainError, ValueError) as err:
        problems.append(str(err))
    return cfg, target, problems


def evaluate_point(model, cluster, base_cfg, point: dict, engine: str = "estimate") -> dict:
    """One row: the point's values and the report's headline numbers. Never raises for a point: bad
    input becomes ``status="invalid"``, any other exception ``status="error"``, each with the reason."""
    from simtrain.estimator import estimate
    from simtrain.sim import simulate
    cfg, target, problems = _point_inputs(cluster, base_cfg, point)
    run = {"estimate": estimate, "simulate": simulate}.get(engine)
    if run is None:
        problems.append(f"engine: unknown engine {engine!r}; one of estimate, simulate")
    if problems:
        return failed_row(point, "; ".join(problems))
    try:
        r = run(model, target, cfg)
    except (SpecError, SimtrainError, ValueError) as err:
        return failed_row(point, str(err))
    except Exception as err:  # noqa: BLE001 — one broken point must not end the sweep (DESIGN.md)
        return failed_row(point, f"{type(err).__name__}: {err}", status="error")
    return _report_row(point, r)


def evaluate_chunk(model, cluster, base_cfg, points: list[dict], engine: str = "estimate") -> list[dict]:
    """The rows of a chunk of points, each with its ``point_key`` (what a Dask task runs)."""
    return [{**evaluate_point(model, cluster, base_cfg, p, engine), "point_key": point_key(p)} for p in points]
