"""Residuals of a calibration: per row predicted vs measured, and MAPE per op class / backend.

``log_error = ln(predicted / measured)`` (what the fit minimises); ``rel_error = predicted / measured − 1``;
MAPE = mean |rel_error| × 100 over a group (the metric the validation suite reports).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simtrain.calibrate.records import Row, _frozen_map

__all__ = ["Residual", "group_of", "residual", "mape_by_group", "format_summary"]


@dataclass(frozen=True)
class Residual:
    bench: str
    group: str
    """The op class (``matmul`` ...), ``optimizer``, or ``collective:<backend>`` / ``h2d`` / ``d2h``."""
    phase: str
    params: Mapping[str, Any]
    dtype: str
    predicted_s: float
    measured_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))

    @property
    def log_error(self) -> float:
        return math.log(self.predicted_s / self.measured_s)

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"bench": self.bench, "group": self.group, "phase": self.phase, "params": dict(self.params),
                "dtype": self.dtype, "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "log_error": self.log_error}


def group_of(row: Row) -> str:
    if row.phase == "optim":
        return "optimizer"
    if row.op_class is not None:
        return row.op_class.value
    if "backend" in row.params:
        return f"collective:{row.params['backend']}:{row.bench}"
    return row.bench


def residual(row: Row, predicted_s: float) -> Residual:
    return Residual(row.bench, group_of(row), row.phase, row.params, row.dtype.value, float(predicted_s),
                    row.median_s)


def mape_by_group(residuals: Sequence[Residual]) -> dict[str, float]:
    """MAPE (%) per group, plus ``all``."""
    groups: dict[str, list[float]] = {}
    for r in residuals:
        groups.setdefault(r.group, []).append(abs(r.rel_error))
        groups.setdefault("all", []).append(abs(r.rel_error))
    return {g: 100.0 * sum(v) / len(v) for g, v in sorted(groups.items())}


def format_summary(residuals: Sequence[Residual]) -> list[str]:
    """A table, one line per group: rows, MAPE, worst case (numbers formatted by ``report.format``)."""
    from simtrain.report.format import format_percent, render_table
    table = []
    for group, mape in mape_by_group(residuals).items():
        mine = [r for r in residuals if group in ("all", r.group)]
        worst = max(mine, key=lambda r: abs(r.rel_error))
        sign = "+" if worst.rel_error >= 0 else "-"
        table.append((group, len(mine), format_percent(mape / 100), sign + format_percent(abs(worst.rel_error)),
                      f"{worst.bench} {worst.phase} { {k: v for k, v in worst.params.items() if k != 'autograd_call_s'} }"))
    return render_table(("group", "rows", "MAPE", "worst", "worst case"), table, right=(1, 2, 3)).splitlines()
