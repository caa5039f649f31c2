"""The compute fit: its parameters' names and bounds, θ ↔ Efficiency, where it starts, and the fit.

Parameter names
---------------

The names of a compute fit's parameters and which bench rows each one moves.

A parameter is a curve field (``matmul.peak_fraction``, ``conv@bw.half_flops``), an op kind's curve
field (``kind:maxpool.half_flops``), a class's issue time (``launch:conv``, ``launch:conv@bw``), an
optimizer's host overhead (``optim:adamw/fused``, ``optim_step:adamw/fused``) or a global
(``launch_overhead_s``). :func:`jacobian_sparsity` gives ``least_squares`` which residuals each can
change (the fit below).

The parameter vector θ
----------------------

The fitted parameters of a device's compute side as one vector θ: what each name means, its bounds,
and the map between θ (natural logs, so fractions and sizes are fitted as ratios and stay positive)
and an :class:`Efficiency` (the fit below fits θ from the start points below).

A name is a curve field (``matmul.peak_fraction``, ``conv@bw.half_flops``, ``kind:layernorm.half_flops``),
a global (``memory_bandwidth_fraction``), an issue time (``launch:matmul``) or an optimizer's overhead
(``optim:adamw/fused``, ``optim_step:adamw/fused``): the names above.

Start points
------------

Where the compute fit starts: the base values, a guess read off the rows
themselves, and that guess with smaller half sizes; and, for the second stage, each optimizer
overhead at what its rows leave unexplained.

The fit
-------

Fitting the compute side of a device: per op class a :class:`ComputeCurve` (peak_fraction,
half_flops), and the shared memory_bandwidth_fraction, memory_half_bytes and launch_overhead_s.

Method: ``scipy.optimize.least_squares`` (trust-region reflective, bounds) on the natural log of time,

    r_i = ln t̂_i(θ) − ln t_i,     t̂_i = simtrain.calibrate.predict.predict_row(row_i, device, eff(θ)),

with θ the natural logs of every parameter (so fractions and sizes are fitted as ratios and stay
positive), the soft-L1 loss with scale 0.2 (≈ 20 % in time) so a few noisy rows cannot drag a curve,
and a weak prior ``λ · (θ − θ_base)`` (λ = 0.02) that pins parameters the rows cannot identify (a class
whose rows are all memory-bound says nothing about its half_flops) to the base spec's values instead of
letting them drift. The fit starts from the base values and from a data-driven guess (each class's best
achieved rate, the median op size, the best streaming rate, half the fastest call: the start points
above) and keeps the better. The parameter vector θ, its bounds and its map to an Efficiency: above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simtrain.calibrate.predict import predict_row, row_flash_tiles, row_gemm, row_optimizer
from simtrain.calibrate.records import Row
from simtrain.cost.compute import (
    DEPTHWISE_CONV_KIND,
    GROUPED_CONV_KIND,
    MATRIX_CLASSES,
    launch_seconds,
    matrix_peak_flops_per_s,
)
from simtrain.cost.optimizer import tensor_overhead_key
from simtrain.glossary import OpClass
from simtrain.specs.hardware import ComputeCurve, Device, Efficiency

__all__ = ["BW_SUFFIX", "OPTIM_PREFIX", "OPTIM_STEP_PREFIX", "LAUNCH_PREFIX", "KIND_PREFIX", "KIND_CLASSES",
           "KIND_ALIASES", "row_kind", "jacobian_sparsity", "BOUNDS", "STRIDE", "param_kind", "curve_of",
           "efficiency_from", "theta_of", "starts", "optimizer_guess", "OPTIM_MIN_START_S", "ComputeFit",
           "fit_compute", "PRIOR_WEIGHT"]


# ──── Parameter names ───────────────────────────────────────────────────────────────────────────────

BW_SUFFIX = "@bw"
"""Suffix of a class whose backward rows get their own curve (``Efficiency.backward_compute``)."""
OPTIM_PREFIX = "optim:"
"""Prefix of an optimizer's per-tensor host overhead, e.g. ``optim:adamw/for-loop``
(``Efficiency.optimizer_tensor_overhead_s``): one parameter per optimizer and implementation the bench
timed, identified by its rows over 8, 32 and 256 tensors, so it is left out of the prior (its base
value is "not costed", which a prior in log space would pull it towards)."""
OPTIM_STEP_PREFIX = "optim_step:"
"""Prefix of an optimizer's per-step host overhead (``Efficiency.optimizer_step_overhead_s``), fitted
with its per-tensor one where the key's rows span :data:`simtrain.calibrate.fit_compute._STEP_TENSOR_COUNTS` tensor counts or more
(fewer cannot tell a cost per step from one per tensor)."""
LAUNCH_PREFIX = "launch:"
"""Prefix of an op class's own issue time (``Efficiency.class_launch_overhead_s``), e.g.
``launch:conv``: fitted where the host runs ahead of the device (``Efficiency.launch_async``), whose
small rows each sit on their class's issue time."""
KIND_PREFIX = "kind:"
"""Prefix of an op kind's own curve (``Efficiency.kind_compute``), e.g. ``kind:maxpool@bw.half_flops``."""
KIND_CLASSES = {"maxpool": OpClass.REDUCTION, "layernorm": OpClass.NORM, "rmsnorm": OpClass.NORM,
                 "batchnorm": OpClass.NORM, GROUPED_CONV_KIND: OpClass.CONV, DEPTHWISE_CONV_KIND: OpClass.CONV}
"""Benches named after an op kind whose rows fit that kind's own curve, with the class it falls back to.
On a CPU the three normalisations are different loops (layer norm: one fused Welford pass per row;
RMS norm: a composite of pow, mean, rsqrt and mul kernels below torch 2.x's fused path; batch norm:
statistics over N·H·W per channel of an NCHW tensor, a strided reduction), 2–3× apart per byte.
Grouped and depthwise convolutions (conv2d rows with groups > 1) run other kernels than dense ones
and than each other (cost/compute.py ``curve_kind``): a curve each, forward and backward."""
KIND_ALIASES = {"maxpool": ("maxpool2d",)}
"""Other kind names of the same kernel: a built model's rule (graph/rules/conv.py ``maxpool2d``)."""


def row_kind(row: Row) -> str:
    """The curve key a row speaks for: its bench (an op kind), or for a conv2d row with groups > 1
    :data:`DEPTHWISE_CONV_KIND` (one output channel per group) or :data:`GROUPED_CONV_KIND`, as
    ``cost.compute.curve_kind`` prices the graph's ops."""
    groups = int(row.params.get("groups", 1))
    if row.bench == "conv2d" and groups > 1:
        return DEPTHWISE_CONV_KIND if int(row.params["k"]) == groups else GROUPED_CONV_KIND
    return row.bench


def _moves(name: str, row: Row) -> bool:
    """Whether parameter ``name`` can change the prediction of ``row`` (a superset is safe: it only
    groups fewer columns of the finite-difference Jacobian)."""
    if name.startswith((OPTIM_PREFIX, OPTIM_STEP_PREFIX)):
        return row.phase == "optim"
    if name.startswith(LAUNCH_PREFIX):  # a class's forward figure also issues its backward where it has none
        key = name.removeprefix(LAUNCH_PREFIX)
        return (row.phase != "optim" and row.op_class is not None and row.op_class.value == key.removesuffix(BW_SUFFIX)
                and (row.phase == "bw" or not key.endswith(BW_SUFFIX)))
    if "." not in name:  # the globals, the cache tier, the strided-dX exponent: every row
        return True
    key = name.split(".")[0]
    if key.startswith(KIND_PREFIX):
        kind = key.removeprefix(KIND_PREFIX).removesuffix(BW_SUFFIX)
        return row_kind(row) in (kind, *KIND_ALIASES.get(kind, ()))
    return row.op_class is not None and row.op_class.value == key.removesuffix(BW_SUFFIX)


def jacobian_sparsity(rows: Sequence[Row], names: Sequence[str]) -> np.ndarray:
    """Which residual each parameter can move: the rows of its own class, kind or optimizer (the
    globals: all), then the prior's diagonal. ``least_squares`` then perturbs parameters that share
    no row together, so a CUDA set's finite-difference Jacobian (≈ 110 parameters, most of them a
    class's or a kind's) costs a few dozen evaluations instead of one per parameter."""
    data = np.array([[_moves(n, r) for n in names] for r in rows], dtype=bool).reshape(len(rows), len(names))
    return np.vstack([data, np.eye(len(names), dtype=bool)]).astype(int)


# ──── The parameter vector θ ────────────────────────────────────────────────────────────────────────

#: (low, high) of each parameter kind, in its own units.
BOUNDS = {"peak_fraction": (1e-5, 1.0), "half_flops": (1.0, 1e14), "memory_bandwidth_fraction": (1e-4, 1.0),
          "memory_half_bytes": (1.0, 1e11), "launch_overhead_s": (1e-9, 1e-1),
          "cache_miss_bandwidth_fraction": (1e-3, 1.0), "strided_agrad_exponent": (1e-3, 2.0),
          "half_rows": (1.0, 1e6), "half_depth": (1e-2, 1e5), "optimizer_tensor_overhead_s": (1e-9, 1e-2),
          "optimizer_step_overhead_s": (1e-9, 1e-2),
          "cache_bytes": (float(1 << 16), 1e12), "panel_bytes_per_s": (1e6, 1e13)}
STRIDE = "strided_agrad_exponent"
"""Fitted when there are backward rows of strided convs."""


def curve_of(eff: Efficiency, key: str) -> ComputeCurve:
    """The curve a name's key prices (a class's, its backward one for ``@bw``, or a kind's)."""
    phase = "bw" if key.endswith(BW_SUFFIX) else "fw"
    if key.startswith(KIND_PREFIX):
        kind = key.removeprefix(KIND_PREFIX).removesuffix(BW_SUFFIX)
        return eff.phase_curve(KIND_CLASSES[kind], phase, kind)
    return eff.phase_curve(OpClass(key.removesuffix(BW_SUFFIX)), phase)


def param_kind(name: str) -> str:
    """The kind of a parameter name: its key in :data:`BOUNDS`."""
    if name.startswith(LAUNCH_PREFIX):
        return "launch_overhead_s"
    if name.startswith(OPTIM_PREFIX):
        return "optimizer_tensor_overhead_s"
    if name.startswith(OPTIM_STEP_PREFIX):
        return "optimizer_step_overhead_s"
    return name.rsplit(".", 1)[-1]


def efficiency_from(theta: np.ndarray, names: Sequence[str], start: Efficiency) -> Efficiency:
    """The Efficiency whose fitted fields are exp(θ) (unvalidated copy: cheap inside the fit loop)."""
    values = dict(zip(names, np.exp(theta), strict=True))
    compute, backward, kinds = dict(start.compute), dict(start.backward_compute), dict(start.kind_compute)
    for name in names:
        if "." in name:
            key = name.split(".")[0]
            curve = ComputeCurve.model_construct(peak_fraction=float(values[f"{key}.peak_fraction"]),
                                                 half_flops=float(values[f"{key}.half_flops"]),
                                                 half_rows=float(values.get(f"{key}.half_rows", 0.0)),
                                                 half_depth=float(values.get(f"{key}.half_depth", 0.0)),
                                                 panel_bytes_per_s=float(values.get(f"{key}.panel_bytes_per_s", 0.0)))
            if key.startswith(KIND_PREFIX):
                kind, bw = key.removeprefix(KIND_PREFIX).removesuffix(BW_SUFFIX), BW_SUFFIX * key.endswith(BW_SUFFIX)
                kinds.update({k + bw: curve for k in (kind, *KIND_ALIASES.get(kind, ()))})
            else:
                (backward if key.endswith(BW_SUFFIX) else compute)[OpClass(key.removesuffix(BW_SUFFIX))] = curve
    optim = dict(start.optimizer_tensor_overhead_s)
    optim.update({n.removeprefix(OPTIM_PREFIX): float(values[n]) for n in names if n.startswith(OPTIM_PREFIX)})
    step = dict(start.optimizer_step_overhead_s)
    step.update({n.removeprefix(OPTIM_STEP_PREFIX): float(values[n]) for n in names if n.startswith(OPTIM_STEP_PREFIX)})
    launch, bw_launch = dict(start.class_launch_overhead_s), dict(start.backward_class_launch_overhead_s)
    for n in (n for n in names if n.startswith(LAUNCH_PREFIX)):
        key = n.removeprefix(LAUNCH_PREFIX)
        (bw_launch if key.endswith(BW_SUFFIX) else launch)[OpClass(key.removesuffix(BW_SUFFIX))] = float(values[n])
    update = {g: float(values[g]) for g in names
              if "." not in g and not g.startswith((OPTIM_PREFIX, OPTIM_STEP_PREFIX, LAUNCH_PREFIX))}
    return start.model_copy(update={"compute": compute, "backward_compute": backward, "kind_compute": kinds,
                                    "optimizer_tensor_overhead_s": optim, "optimizer_step_overhead_s": step,
                                    "class_launch_overhead_s": launch,
                                    "backward_class_launch_overhead_s": bw_launch, **update})


def theta_of(eff: Efficiency, names: Sequence[str]) -> np.ndarray:
    """θ of ``eff``'s values for ``names``, each clipped to its bounds."""
    vals = []
    for name in names:
        if name.startswith(LAUNCH_PREFIX):
            key = name.removeprefix(LAUNCH_PREFIX)
            vals.append(launch_seconds(OpClass(key.removesuffix(BW_SUFFIX)), eff, "bw" if key.endswith(BW_SUFFIX) else "fw"))
        elif name.startswith(OPTIM_PREFIX):
            vals.append(eff.optimizer_tensor_overhead_s.get(name.removeprefix(OPTIM_PREFIX), 0.0))
        elif name.startswith(OPTIM_STEP_PREFIX):
            vals.append(eff.optimizer_step_overhead_s.get(name.removeprefix(OPTIM_STEP_PREFIX), 0.0))
        elif "." in name:
            key, field = name.split(".")
            value = getattr(curve_of(eff, key), field)
            # no panel term (0) is the fastest rate the bounds allow, not the slowest
            vals.append(BOUNDS[field][1] if field == "panel_bytes_per_s" and value <= 0 else value)
        else:
            vals.append(getattr(eff, name))
    return np.log([min(max(v, BOUNDS[param_kind(n)][0]), BOUNDS[param_kind(n)][1]) for v, n in zip(vals, names, strict=True)])


# ──── Start points ──────────────────────────────────────────────────────────────────────────────────

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


# ──── The fit ───────────────────────────────────────────────────────────────────────────────────────

PRIOR_WEIGHT = 0.02
_GLOBALS = ("memory_bandwidth_fraction", "memory_half_bytes", "launch_overhead_s")
_CACHE = ("cache_miss_bandwidth_fraction", "cache_bytes")
"""Fitted only when the start efficiency has a cache tier (``cache_bytes`` > 0, the machine's
last-level cache size as the prior): on the copy rows alone where they place it
(:func:`_cache_tier`), else with everything."""
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
    above = sum(r.bytes_moved > start.cache_bytes for r in copies)
    if min(above, len(copies) - above) < _CACHE_MIN_ROWS:
        return None
    names = [*_GLOBALS, *_CACHE]
    best = _solve(copies, [], device, start, names, starts(copies, names, device, theta_of(start, names), start))
    values = dict(zip(names, np.exp(best.x), strict=True))
    return {n: float(values[n]) for n in _CACHE}


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
