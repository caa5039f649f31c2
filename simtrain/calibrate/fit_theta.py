"""The fitted parameters of a device's compute side as one vector θ: what each name means, its bounds,
and the map between θ (natural logs, so fractions and sizes are fitted as ratios and stay positive)
and an :class:`Efficiency` (the fit below fits θ from the start points below).

A name is a curve field (``matmul.peak_fraction``, ``conv@bw.half_flops``, ``kind:layernorm.half_flops``),
a global (``memory_bandwidth_fraction``), an issue time (``launch:matmul``) or an optimizer's overhead
(``optim:adamw/fused``, ``optim_step:adamw/fused``): the names above.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simtrain.calibrate.fit_param_names import (
    BW_SUFFIX,
    KIND_ALIASES,
    KIND_CLASSES,
    KIND_PREFIX,
    LAUNCH_PREFIX,
    OPTIM_PREFIX,
    OPTIM_STEP_PREFIX,
)
from simtrain.cost.compute import (
    launch_seconds,
)
from simtrain.glossary import OpClass
from simtrain.specs.hardware import ComputeCurve, Efficiency

__all__ = ["BOUNDS", "STRIDE", "curve_of", "param_kind", "efficiency_from", "theta_of"]


#: (low, high) of each parameter kind, in its own units.
BOUNDS = {"peak_fraction": (1e-5, 1.0), "half_flops": (1.0, 1e14), "memory_bandwidth_fraction": (1e-4, 1.0),
          "memory_half_bytes": (1.0, 1e11), "launch_overhead_s": (1e-9, 1e-1),
          "cache_miss_bandwidth_fraction": (1e-3, 1.0), "strided_agrad_exponent": (1e-3, 2.0),
          "half_rows": (1.0, 1e6), "half_depth": (1e-2, 1e5), "optimizer_tensor_overhead_s": (1e-9, 1e-2),
          "optimizer_step_overhead_s": (1e-9, 1e-2),
          "cache_bytes": (float(1 << 16), 1e12), "panel_bytes_per_s": (1e6, 1e13),
          "cache_hit_exponent": (1.0, 8.0)}
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
