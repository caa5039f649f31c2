"""Where the compute fit starts: the base values, a guess read off the rows
themselves, and that guess with smaller half sizes; and, for the second stage, each optimizer
overhead at what its rows leave unexplained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from simtrain.calibrate.fit_param_names import (
    BW_SUFFIX,
    KIND_PREFIX,
    LAUNCH_PREFIX,
    OPTIM_STEP_PREFIX,
    row_kind,
)
from simtrain.calibrate.fit_theta import BOUNDS, STRIDE, efficiency_from, param_kind
from simtrain.calibrate.predict import predict_row, row_flash_tiles, row_gemm, row_optimizer
from simtrain.calibrate.records import Row
from simtrain.cost.compute import (
    MATRIX_CLASSES,
    matrix_peak_flops_per_s,
)
from simtrain.cost.optimizer import tensor_overhead_key
from simtrain.glossary import OpClass
from simtrain.specs.hardware import Device, Efficiency

__all__ = ["OPTIM_MIN_START_S", "optimizer_guess", "starts"]


OPTIM_MIN_START_S = 1e-6
"""The smallest start of an optimizer's per-tensor overhead: 1 µs, about one Python statement."""


def _reference_peak(row: Row, device: Device) -> float:
    if row.op_class in MATRIX_CLASSES:
        return matrix_peak_flops_per_s(device, row.dtype)
    return device.vector_peak_flops_per_s


def _half_point(sizes: Sequence[float], rates: Sequence[float]) -> float:
    """The size whose achieved rate is closest to half the best rate: the definition of a half size."""
    best = max(rates)
    return min(zip(sizes, rates, strict=True), key=lambda sr: abs(math.log(max(sr[1], 1e-300) / (best / 2))))[0]


def _rows_of(rows: Sequence[Row], key: str) -> list[Row]:
    """The rows a curve key speaks for: a class's (its backward rows for ``@bw``), or a kind's bench."""
    bw = key.endswith(BW_SUFFIX)
    if key.startswith(KIND_PREFIX):
        kind = key.removeprefix(KIND_PREFIX).removesuffix(BW_SUFFIX)
        return [r for r in rows if row_kind(r) == kind and (r.phase == "bw") == bw]
    cls = OpClass(key.removesuffix(BW_SUFFIX))
    return [r for r in rows if r.op_class == cls and r.flops > 0 and r.phase != "optim"
            and (r.phase == "bw" or not bw)]


def _data_guess(rows: Sequence[Row], names: Sequence[str], device: Device, base: np.ndarray,
                start: Efficiency) -> np.ndarray:
    """Best achieved fraction of peak per class (backward curves: of its backward rows); half sizes
    where the achieved rate is half the best (per flash-attention tile where ``start`` prices tiles);
    the best streaming rate, and half of it as a panel rate (a pack reads and writes its bytes); half the
    fastest call as launch overhead; a strided-dX exponent of ½
    (midway between a dedicated kernel and zero insertion)."""
    guess = dict(zip(names, np.exp(base), strict=True))
    if STRIDE in guess:
        guess[STRIDE] = 0.5
    for name in names:
        if name.endswith(".peak_fraction"):
            key = name.split(".")[0]
            mine = _rows_of(rows, key)
            guess[name] = max(r.flops_per_s / _reference_peak(r, device) for r in mine)
            if f"{key}.half_rows" in guess:  # a size in the middle of the rows the grid spans
                guess[f"{key}.half_rows"] = float(np.median([row_gemm(r)[1] for r in mine]))
            if f"{key}.half_depth" in guess:
                guess[f"{key}.half_depth"] = float(np.median([row_gemm(r)[0].k for r in mine]))
            guess[f"{key}.half_flops"] = _half_point([r.flops / r.calls / row_flash_tiles(r, device, start)
                                                      for r in mine], [r.flops_per_s for r in mine])
    streaming = [r for r in rows if r.op_class not in MATRIX_CLASSES and r.bytes_moved > 0]
    guess["memory_bandwidth_fraction"] = max(r.bytes_per_s for r in streaming) / device.memory_bandwidth_bytes_per_s
    for name in (n for n in names if n.endswith(".panel_bytes_per_s")):  # a copy reads and writes the panel
        guess[name] = max(r.bytes_per_s for r in streaming) / 2
    guess["memory_half_bytes"] = _half_point([r.bytes_moved / r.calls for r in streaming],
                                             [r.bytes_per_s for r in streaming])
    guess["launch_overhead_s"] = min(r.median_s / r.calls for r in rows) / 2
    for name in (n for n in names if n.startswith(LAUNCH_PREFIX)):  # a class's quickest call: its issue time
        key = name.removeprefix(LAUNCH_PREFIX)
        cls, bw = OpClass(key.removesuffix(BW_SUFFIX)), key.endswith(BW_SUFFIX)
        guess[name] = min(r.median_s / r.calls for r in rows if r.op_class == cls and r.phase != "optim"
                          and (r.phase == "bw") == bw)
    return np.log([min(max(guess[n], BOUNDS[param_kind(n)][0]), BOUNDS[param_kind(n)][1]) for n in names])


def optimizer_guess(rows: Sequence[Row], names: Sequence[str], device: Device, theta: np.ndarray,
                     start: Efficiency) -> np.ndarray:
    """``theta`` (a fit without the optimizer overheads) extended by each optimizer's overheads at what
    its rows leave unexplained (measured − predicted without them): per tensor, the median of that over
    the tensor count; where the key also has a per-step overhead, the least-squares line through it
    against the tensor count (:func:`_per_step_and_tensor`). Each at least :data:`OPTIM_MIN_START_S`
    (the fit works in log space, where a start near 0 has no gradient: ∂t/∂ln θ ∝ θ; the bounds still
    let it go to 1 ns)."""
    eff = efficiency_from(theta, names[:len(theta)], start)
    fitted = set(names[len(theta):])
    starts: dict[str, tuple[float, float]] = {}  # key → (per step, per tensor), each key's rows predicted once
    for key in {n.split(":", 1)[1] for n in fitted}:
        mine = [r for r in rows if r.phase == "optim" and tensor_overhead_key(*row_optimizer(r)) == key]
        tensors = [max(int(r.params.get("tensors", 1)), 1) for r in mine]
        left = [r.median_s - predict_row(r, device, eff) for r in mine]
        starts[key] = (_per_step_and_tensor(left, tensors) if OPTIM_STEP_PREFIX + key in fitted
                       else (0.0, float(np.median([x / t for x, t in zip(left, tensors, strict=True)]))))
    extra = []
    for name in names[len(theta):]:
        per_step, per_tensor = starts[name.split(":", 1)[1]]
        value = per_step if name.startswith(OPTIM_STEP_PREFIX) else per_tensor
        extra.append(math.log(min(max(value, OPTIM_MIN_START_S), BOUNDS[param_kind(name)][1])))
    return np.concatenate([theta, extra])


def _per_step_and_tensor(left: Sequence[float], tensors: Sequence[int]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (tensor count, seconds unexplained)."""
    t, y = np.asarray(tensors, dtype=float), np.asarray(left, dtype=float)
    slope, intercept = np.polyfit(t, y, 1)
    return float(intercept), float(slope)


def starts(rows: Sequence[Row], names: Sequence[str], device: Device, prior: np.ndarray,
            start: Efficiency) -> list[np.ndarray]:
    """The base values, the data guess, and the data guess with every half size ÷ 30 (launch overhead
    absorbs part of the small-op slowdown, so the true half sizes are often below the half points).
    Several starts because a half size far below its true value has almost no gradient (∂t/∂ln h ∝ h)."""
    guess = _data_guess(rows, names, device, prior, start)
    smaller = guess - np.array([math.log(30.0) if param_kind(n).startswith(("half", "memory_half")) else 0.0
                                for n in names])
    return [prior, guess, smaller]
