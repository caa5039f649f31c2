"""Stack-level calibration factors: what each one scales in a device's efficiency profile.

A factor is a bounded multiplier on one group of *achieved* rates, so a fitted value reads directly
("this stack realises 0.91 × the component-measured GEMM and attention rates"):

| factor          | scales                                                                  | bounds      |
|-----------------|-------------------------------------------------------------------------|-------------|
| compute         | matmul / conv / attention ceilings (and the matmul ceilings per dtype)  | 0.25 – 1.6  |
|                 | and every fused-attention kernel                                        |             |
| communication   | achieved link bandwidth of every collective and send                    | 0.2 – 2.0   |
| memory          | achieved memory bandwidth (memory-bound ops, optimizer step)            | 0.25 – 1.6  |
| launch          | per-kernel launch overhead                                              | 0.1 – 10    |
| class:<op class>| that op class's compute ceiling (``Efficiency.compute[c].peak_fraction``;| 0.05 – 4    |
|                 | matmul also ``dtype_peak_fraction``, attention also every fused-        |             |
|                 | attention kernel) — fitted from a profiler                              |             |
|                 | trace's per-class time (:mod:`simtrain.calibrate.trace_fit`)             |             |

A scaled fraction never exceeds 1 (no kernel beats the datasheet): the clip is part of the model.
Factors are fitted in this priority order, as many as the runs can identify (one run fits one).

A class factor moves only its class's compute leg; memory-bound time of every class moves with the
shared ``memory`` factor (one memory-bandwidth efficiency per device: no per-class memory rate
exists to scale). Its bounds are wider than ``compute``'s because one class's kernels on a busy CPU
can run far from their microbenchmark (small shapes, thread start-up) — the trace says by how much.
"""

from __future__ import annotations

import math

from simtrain.cost.compute import MATRIX_CLASSES, device_efficiency
from simtrain.cost.realisation import scaled_attention_kernels
from simtrain.errors import SpecError
from simtrain.glossary import OpClass
from simtrain.specs.hardware import Cluster, ComputeCurve, Device, Efficiency

__all__ = ["FACTORS", "BOUNDS", "CLASS_FACTORS", "class_factor", "scaled_efficiency", "scaled_device",
           "scaled_cluster", "check_factors"]



FACTORS = ("compute", "communication", "memory", "launch")


def class_factor(op_class: OpClass | str) -> str:
    """The factor name of one op class: ``class:matmul``."""
    return f"class:{OpClass(op_class).value}"


CLASS_FACTORS = tuple(class_factor(c) for c in OpClass)
BOUNDS = {"compute": (0.25, 1.6), "communication": (0.2, 2.0), "memory": (0.25, 1.6), "launch": (0.1, 10.0),
          **dict.fromkeys(CLASS_FACTORS, (0.05, 4.0))}


def _clip(fraction: float) -> float:
    return min(1.0, fraction)


def _scaled_curve(curve: ComputeCurve, k: float) -> ComputeCurve:
    """``curve`` k times faster: its ceiling (clipped at 1) and its panel rate, the two rates of its
    compute leg (``ComputeCurve``)."""
    return curve.model_copy(update={"peak_fraction": _clip(curve.peak_fraction * k),
                                    "panel_bytes_per_s": curve.panel_bytes_per_s * k})


def _scaled_dtype_ceilings(eff: Efficiency, k: float) -> dict:
    """The matmul ceilings per dtype (``Efficiency.dtype_peak_fraction``) k times faster, clipped at 1:
    they stand in for the matmul curve's ceiling, so whatever scales that scales them."""
    return {dtype: _clip(f * k) for dtype, f in eff.dtype_peak_fraction.items()}


def _scaled_compute(eff: Efficiency, k: float) -> dict:
    compute = {c: (_scaled_curve(curve, k) if c in MATRIX_CLASSES else curve) for c, curve in eff.compute.items()}
    kernels = scaled_attention_kernels(eff.attention_kernels, k)
    return {"compute": compute, "attention_kernels": kernels, "dtype_peak_fraction": _scaled_dtype_ceilings(eff, k)}


def _scaled_classes(eff: Efficiency, factors: dict[str, float]) -> dict:
    """Each ``class:<c>`` factor on its class's ceiling (attention: also the fused kernels)."""
    compute = dict(eff.compute)
    kernels = dict(eff.attention_kernels)
    ceilings = _scaled_dtype_ceilings(eff, factors.get(class_factor(OpClass.MATMUL), 1.0))
    for c, curve in eff.compute.items():
        k = factors.get(class_factor(c), 1.0)
        if k == 1.0:
            continue
        compute[c] = _scaled_curve(curve, k)
        if c is OpClass.ATTENTION:
            kernels = scaled_attention_kernels(kernels, k)
    return {"compute": compute, "attention_kernels": kernels, "dtype_peak_fraction": ceilings}


def scaled_efficiency(eff: Efficiency, factors: dict[str, float], source: str = "calibrated") -> Efficiency:
    """``eff`` with each factor applied (absent factors are 1)."""
    update: dict = {}
    k = factors.get("compute", 1.0)
    if k != 1.0:
        update.update(_scaled_compute(eff, k))
    if any(factors.get(name, 1.0) != 1.0 for name in CLASS_FACTORS):
        eff = eff.model_copy(update=update)  # a class factor multiplies onto the stack-wide compute factor
        update.update(_scaled_classes(eff, factors))
    if factors.get("communication", 1.0) != 1.0:
        k = factors["communication"]
        update["link_bandwidth_fraction"] = _clip(eff.link_bandwidth_fraction * k)
        update["link_fractions"] = {name: _clip(v * k) for name, v in eff.link_fractions.items()}
    if factors.get("memory", 1.0) != 1.0:
        update["memory_bandwidth_fraction"] = _clip(eff.memory_bandwidth_fraction * factors["memory"])
    if factors.get("launch", 1.0) != 1.0:
        update["launch_overhead_s"] = eff.launch_overhead_s * factors["launch"]
    update["source"] = f"{eff.source} × {source}"[:300]
    return eff.model_copy(update=update)


def scaled_device(device: Device, factors: dict[str, float], source: str = "calibrated") -> Device:
    return device.model_copy(update={"efficiency": scaled_efficiency(device_efficiency(device), factors, source)})


def scaled_cluster(cluster: Cluster, factors: dict[str, float], source: str = "calibrated") -> Cluster:
    """``cluster`` whose node's device carries the scaled efficiency."""
    device = scaled_device(cluster.node.device, factors, source)
    return cluster.model_copy(update={"node": cluster.node.model_copy(update={"device": device})})


def check_factors(factors: dict[str, float]) -> None:
    """Unknown names and values outside the bounds are an error (a calibration file is input)."""
    for name, value in factors.items():
        if name not in BOUNDS:
            raise SpecError.one(None, f"factors.{name}", f"unknown factor; known: {', '.join(FACTORS)} "
                                "and class:<op class>")
        lo, hi = BOUNDS[name]
        if not (isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi):
            raise SpecError.one(None, f"factors.{name}", f"must be a number in [{lo}, {hi}]")


