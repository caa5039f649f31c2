"""The compute fit: its parameters' names and bounds, θ ↔ Efficiency, where it starts, and the fit.

Fitting the compute side of a device: per op class a :class:`ComputeCurve` (peak_fraction,
half_flops), and the shared memory_bandwidth_fraction, memory_half_bytes and launch_overhead_s.

Method: ``scipy.optimize.least_squares`` (trust-region reflective, bounds) on the natural log of time,

    r_i = ln t̂_i(θ) − ln t_i,     t̂_i = simtrain.calibrate.predict.predict_row(row_i, device, eff(θ)),

with θ the natural logs of every parameter (so fractions and sizes are fitted as ratios and stay
positive), the soft-L1 loss with scale 0.2 (≈ 20 % in time) so a few noisy rows cannot drag a curve,
and a weak prior ``λ · (θ − θ_base)`` (λ = 0.02) that pins parameters the rows cannot identify (a class
whose rows are all memory-bound says nothing about its half_flops) to the base spec's values instead of
letting them drift. The fit starts from the base values and from a data-driven guess (each class's best
achieved rate, the median op size, the best streaming rate, half the fastest call: the start points)
and keeps the better.

The parameters' names and which rows they move are in :mod:`simtrain.calibrate.fit_param_names`, the
parameter vector θ, its bounds and its map to an Efficiency in :mod:`simtrain.calibrate.fit_theta`, the
start points in :mod:`simtrain.calibrate.fit_start`; their names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simtrain.calibrate.fit_param_names import (  # noqa: F401  (re-exported)
    BW_SUFFIX,
    KIND_ALIASES,
    KIND_CLASSES,
    KIND_PREFIX,
    LAUNCH_PREFIX,
    OPTIM_PREFIX,
    OPTIM_STEP_PREFIX,
    jacobian_sparsity,
    row_kind,
)
from simtrain.calibrate.fit_start import OPTIM_MIN_START_S, optimizer_guess, starts  # noqa: F401  (re-exported)
from simtrain.calibrate.fit_theta import BOUNDS, STRIDE, curve_of, efficiency_from, param_kind, theta_of  # noqa: F401  (re-exported)
from simtrain.calibrate.predict import predict_row, row_optimizer
from simtrain.calibrate.records import Row
from simtrain.cost.optimizer import tensor_overhead_key
from simtrain.glossary import OpClass
from simtrain.specs.hardware import Device, Efficiency

__all__ = ["BW_SUFFIX", "OPTIM_PREFIX", "OPTIM_STEP_PREFIX", "LAUNCH_PREFIX", "KIND_PREFIX", "KIND_CLASSES",
           "KIND_ALIASES", "row_kind", "jacobian_sparsity", "BOUNDS", "STRIDE", "param_kind", "curve_of",
           "efficiency_from", "theta_of", "starts", "optimizer_guess", "OPTIM_MIN_START_S", "ComputeFit",
           "fit_compute", "PRIOR_WEIGHT"]


# ──── The fit ─────────────────────────────────────────────────────────────────────────────────────────

PRIOR_WEIGHT = 0.02
_GLOBALS = ("memory_bandwidth_fraction", "memory_half_bytes", "launch_overhead_s")
_CACHE = ("cache_miss_bandwidth_fraction", "cache_bytes")
"""Fitted only when the start efficiency has a cache tier (``cache_bytes`` > 0, the machine's
last-level cache size as the prior): on the copy rows alone where they place it
(:func:`_cache_tier`), else with everything."""
_CACHE_TIER = (*_CACHE, "cache_hit_exponent")
"""What the copies' own stage fits (:func:`_cache_tier`); the exponent only there, where the copies past
the cache are the only rows, so no other mechanism can bend the tail."""
CACHE_BENCH = "copy"
"""The rows the cache tier is fitted on: one mechanism (read a buffer, write another) over sizes from
1 KiB to 256 MiB, either side of the last-level cache."""
_CACHE_MIN_ROWS = 2
"""Copy rows needed on each side of the start's cache size to fit the tier on them alone."""
_BW_CLASSES = frozenset({OpClass.CONV, OpClass.ATTENTION})
"""Classes fitted with a backward curve when they have backward rows: a conv's dX and dW kernels
are other loop nests than its forward (dW reduces over batch and positions); a fused attention's
backward is another kernel than its forward (five GEMMs per tile against two, plus the recomputed
softmax: on this project's CPU 2.1–2.4× the forward's time against 2× its counted FLOPs, and a fixed
cost per tile 1.4× the forward's); a GEMM's backward is the same GEMM kernel transposed, so matmul
keeps one curve."""
_ROWS_CLASSES = frozenset({OpClass.CONV})
"""Classes fitted with a rows ramp (``ComputeCurve.half_rows``): the conv grid spans 2×2 to 56×56 maps
(a CPU conv kernel blocks over output positions, and its dW reduces over them)."""
_DEPTH_CLASSES = frozenset({OpClass.CONV, OpClass.MATMUL})
"""Classes fitted with a depth ramp (``ComputeCurve.half_depth``): reductions from 9 (depthwise) to
4608 in the conv grid, K = 8 to 4096 in the GEMM grid (one with a short reduction stores its tile more
often than it accumulates)."""
_PANEL_CLASSES = frozenset({OpClass.MATMUL})
"""Classes fitted with a panel rate (``ComputeCurve.panel_bytes_per_s``) instead of a rows ramp: the
GEMM grid has M = 1 and 16 against 4096-wide weights and M = 4096 against 64 × 64 ones. A rows ramp
is, in the forward, the same k · n term (flops · h / (m · rate) = 2 k n h / rate) but it also slows a
memory-bound M = 1 product's compute leg and prices a weight gradient by its n instead of its k × n
output. On run 37's GEMM rows (a scratch fit of the matmul curve alone, each placement mode): rows
ramp 8.2 / 9.3 % MAPE, panel 6.9 / 8.5 %, the fitted ramp going to its floor once the panel is there.
Convolutions keep the rows ramp: their weights are small beside their N·P·Q rows."""
_STEP_TENSOR_COUNTS = 3
_SHADOWED = frozenset({"layernorm", "rmsnorm", "batchnorm"})
"""Kinds whose rows also fit their class's curve (as if they had no curve of their own), so the class
curve still speaks for the class's other kinds (group norm) instead of falling back to the base."""

@dataclass(frozen=True)
class ComputeFit:
    efficiency: Efficiency
    names: tuple[str, ...]
    """Fitted parameter names, e.g. ``matmul.peak_fraction``, ``launch_overhead_s``."""
    unidentified: tuple[str, ...]
    """Parameters the rows barely constrain (left near the base by the prior)."""
    cost: float
    nfev: int
    success: bool


def _names(classes: Sequence[OpClass], cache: bool = False, bw_classes: Sequence[OpClass] = (),
           strided: bool = False) -> list[str]:
    keys = [c.value for c in classes] + [c.value + BW_SUFFIX for c in bw_classes]
    names = [f"{k}.{p}" for k in keys for p in ("peak_fraction", "half_flops")] + list(_GLOBALS)
    for p, fitted in (("half_rows", _ROWS_CLASSES), ("half_depth", _DEPTH_CLASSES), ("panel_bytes_per_s", _PANEL_CLASSES)):
        names += [f"{k}.{p}" for k in keys if OpClass(k.removesuffix(BW_SUFFIX)) in fitted]
    return names + list(_CACHE) * cache + [STRIDE] * strided


def _optim_names(rows: Sequence[Row]) -> list[str]:
    """One per-tensor overhead per (optimizer, implementation) with optimizer rows, and one per-step
    overhead for those whose rows span :data:`_STEP_TENSOR_COUNTS` tensor counts."""
    counts: dict[str, set[int]] = {}
    for r in rows:
        if r.phase == "optim":
            counts.setdefault(tensor_overhead_key(*row_optimizer(r)), set()).add(int(r.params.get("tensors", 0)))
    keys = sorted(counts)
    return [OPTIM_PREFIX + k for k in keys] + [OPTIM_STEP_PREFIX + k for k in keys if len(counts[k]) >= _STEP_TENSOR_COUNTS]


def _kind_names(rows: Sequence[Row]) -> list[str]:
    """Curve parameters of each op kind with bench rows (forward; ``@bw`` when it has backward rows)."""
    keys = sorted({row_kind(r) + (BW_SUFFIX if r.phase == "bw" else "") for r in rows if row_kind(r) in KIND_CLASSES})
    return [f"{KIND_PREFIX}{k}.{p}" for k in keys for p in ("peak_fraction", "half_flops")]

def _launch_names(rows: Sequence[Row], start: Efficiency) -> list[str]:
    """One issue time per op class with compute rows, where ``start`` launches asynchronously."""
    if not start.launch_async:
        return []
    forward = sorted({r.op_class.value for r in rows if r.phase != "optim"})
    backward = sorted({r.op_class.value for r in rows if r.phase == "bw"})
    return [LAUNCH_PREFIX + c for c in forward] + [LAUNCH_PREFIX + c + BW_SUFFIX for c in backward]


def _unidentified(jac: np.ndarray, n_rows: int, names: Sequence[str]) -> tuple[str, ...]:
    jac = jac.toarray() if hasattr(jac, "toarray") else np.asarray(jac)  # sparse with jac_sparsity
    data = np.linalg.norm(jac[:n_rows], axis=0)
    scale = max(float(data.max()), 1e-12)
    return tuple(n for n, v in zip(names, data, strict=True) if v < 1e-3 * scale)


def fit_compute(rows: Sequence[Row], device: Device, start: Efficiency) -> ComputeFit:
    """Fit ``start``'s compute-side parameters to ``rows`` (compute rows: ``op_class`` not None).

    Two stages: every curve and global from several starts with the optimizers' per-tensor overheads
    left at the start's values, then everything together from that optimum with each overhead started
    at what its rows leave unexplained (:func:`optimizer_guess`). Fitted from the multi-start alone,
    the overheads steered a start that otherwise finds the truth of a synthetic set into another basin
    (memory_half_bytes at its bound, the launch overhead 60 % high)."""
    rows = [r for r in rows if r.op_class is not None]
    tier = _cache_tier(rows, device, start)
    start = start.model_copy(update=tier or {})
    classes = sorted({r.op_class for r in rows if r.flops > 0 and r.phase != "optim"}, key=lambda c: c.value)
    bw_classes = sorted({r.op_class for r in rows if r.phase == "bw" and r.op_class in _BW_CLASSES and r.flops > 0},
                        key=lambda c: c.value)
    strided = any(r.bench == "conv2d" and r.phase == "bw" and int(r.params.get("stride", 1)) > 1 for r in rows)
    names = (_names(classes, start.cache_bytes > 0 and tier is None, bw_classes, strided) + _kind_names(rows)
             + _launch_names(rows, start))
    shadow = [r for r in rows if r.bench in _SHADOWED and f"{KIND_PREFIX}{r.bench}.peak_fraction" in names]
    first = _solve(rows, shadow, device, start, names, starts(rows, names, device, theta_of(start, names), start))
    best = first
    optim = _optim_names(rows)
    if optim:
        x0 = optimizer_guess(rows, names + optim, device, first.x, start)
        names = names + optim
        best = _solve(rows, shadow, device, start, names, [x0])
    eff = efficiency_from(best.x, names, start)
    return ComputeFit(eff, tuple(names) + tuple(tier or ()), _unidentified(best.jac, len(rows) + len(shadow), names),
                      float(best.cost),
                      int(first.nfev + (best.nfev if best is not first else 0)), bool(best.success))


def _cache_tier(rows: Sequence[Row], device: Device, start: Efficiency) -> dict[str, float] | None:
    """``cache_bytes`` and ``cache_miss_bandwidth_fraction`` fitted on the copy rows alone (with the
    memory globals, which the main fit then refits), or None where ``start`` has no cache tier or the
    copies do not reach :data:`_CACHE_MIN_ROWS` sizes either side of it.

    Why a stage of its own: fitted with every row, the tier is the compromise of mechanisms it does not
    model — in-place optimizer updates that stream without write-allocate reads, norms and softmaxes far
    from their memory bound, out-of-place elementwise ops paying first touch — whose rows past the cache
    missed their predictions by −31 to +89 % in one set. That compromise is flat, so back-to-back sets
    landed on different points of it (capacity 17 against 22 MiB, miss fraction 0.34 against 0.26) and
    moved the wide MLP's update, the one step cost past the cache, by 7 %. The copies are one mechanism
    over 1 KiB to 256 MiB; fitted on them, the two sets give 0.20 against 0.22."""
    if start.cache_bytes <= 0:
        return None
    copies = [r for r in rows if r.bench == CACHE_BENCH and r.phase == "fw"]
    sizes = sorted(r.bytes_moved for r in copies)
    if len(sizes) > _CACHE_MIN_ROWS and sum(b > start.cache_bytes for b in sizes) < _CACHE_MIN_ROWS:
        # sysfs names the host's cache (a 2-core Xeon VM: 480 MiB, its copies' knee at 64-128 MiB):
        # start below the largest copies instead of leaving the tier to the joint fit
        start = start.model_copy(update={"cache_bytes": float(sizes[-_CACHE_MIN_ROWS - 1])})
    above = sum(b > start.cache_bytes for b in sizes)
    if min(above, len(copies) - above) < _CACHE_MIN_ROWS:
        return None
    names = [*_GLOBALS, *_CACHE_TIER]
    best = _solve(copies, [], device, start, names, starts(copies, names, device, theta_of(start, names), start))
    values = dict(zip(names, np.exp(best.x), strict=True))
    return {n: float(values[n]) for n in _CACHE_TIER}


MAX_NFEV_PER_PARAMETER = 4
"""Iterations allowed per fitted parameter. Fits of this project's measurement sets stop at ftol after
33–68 iterations of 46–51 parameters (about 0.4 s each: every iteration evaluates a finite-difference
Jacobian, one prediction of every row per parameter). The old cap, 300 per parameter, let a noisy
tiny set run for 7 minutes inside the test suite; a fit cut short is reported (``fit_info.success``
False, its ``nfev``), never silent."""


def _solve(rows: Sequence[Row], shadow: Sequence[Row], device: Device, start: Efficiency, names: Sequence[str],
           starts: Sequence[np.ndarray]):
    """``least_squares`` on the log-time residuals of ``rows`` (and ``shadow`` rows on their class's
    curve) plus the prior, from each of ``starts``; the result of lowest cost."""
    log_t = np.log([r.median_s for r in rows] + [r.median_s for r in shadow])
    prior = theta_of(start, names)
    weight = PRIOR_WEIGHT * np.array([0.0 if n.startswith(OPTIM_PREFIX) else 1.0 for n in names])
    lo = np.log([BOUNDS[param_kind(n)][0] for n in names])
    hi = np.log([BOUNDS[param_kind(n)][1] for n in names])

    def resid(theta: np.ndarray) -> np.ndarray:
        eff = efficiency_from(theta, names, start)
        pred = np.log([predict_row(r, device, eff) for r in rows]
                      + [predict_row(r, device, eff, own_kind=False) for r in shadow])
        return np.concatenate([pred - log_t, weight * (theta - prior)])

    sparsity = jacobian_sparsity([*rows, *shadow], names)
    best = None
    for x0 in starts:
        res = least_squares(resid, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                            x_scale=1.0, max_nfev=MAX_NFEV_PER_PARAMETER * len(names), jac_sparsity=sparsity)
        if best is None or res.cost < best.cost:
            best = res
    return best
