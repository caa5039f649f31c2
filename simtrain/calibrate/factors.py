"""Stack-level calibration factors: what each one scales in a device's efficiency profile.

A factor is a bounded multiplier on one group of *achieved* rates, so a fitted value reads directly
("this stack realises 0.91 × the component-measured GEMM and attention rates"):

| factor          | scales                                                                  | bounds      |
|-----------------|-------------------------------------------------------------------------|-------------|
| compute         | matmul / conv / attention ceilings and every fused-attention kernel     | 0.25 – 1.6  |
| communication   | achieved link bandwidth of every collective and send                    | 0.2 – 2.0   |
| memory          | achieved memory bandwidth (memory-bound ops, optimizer step)            | 0.25 – 1.6  |
| launch          | per-kernel launch overhead                                              | 0.1 – 10    |

A scaled fraction never exceeds 1 (no kernel beats the datasheet): the clip is part of the model.
Factors are fitted in this priority order, as many as the runs can identify (one run fits one).
"""

from __future__ import annotations

import math

from simtrain.cost.compute import MATRIX_CLASSES, device_efficiency
from simtrain.specs.hardware import Cluster, Device, Efficiency

__all__ = ["FACTORS", "BOUNDS", "scaled_efficiency", "scaled_device", "scaled_cluster"]

FACTORS = ("compute", "communication", "memory", "launch")
BOUNDS = {"compute": (0.25, 1.6), "communication": (0.2, 2.0), "memory": (0.25, 1.6), "launch": (0.1, 10.0)}


def _clip(fraction: float) -> float:
    return min(1.0, fraction)


def _scaled_compute(eff: Efficiency, k: float) -> dict:
    compute = {c: (curve.model_copy(update={"peak_fraction": _clip(curve.peak_fraction * k)})
                   if c in MATRIX_CLASSES else curve) for c, curve in eff.compute.items()}
    kernels = {name: kern.model_copy(update={"fw_peak_fraction": _clip(kern.fw_peak_fraction * k),
                                             "bw_peak_fraction": _clip(kern.bw_peak_fraction * k)})
               for name, kern in eff.attention_kernels.items()}
    return {"compute": compute, "attention_kernels": kernels}


def scaled_efficiency(eff: Efficiency, factors: dict[str, float], source: str = "calibrated") -> Efficiency:
    """``eff`` with each factor applied (absent factors are 1)."""
    update: dict = {}
    k = factors.get("compute", 1.0)
    if k != 1.0:
        update.update(_scaled_compute(eff, k))
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
    from simtrain.errors import SpecError
    for name, value in factors.items():
        if name not in BOUNDS:
            raise SpecError.one(None, f"factors.{name}", f"unknown factor; known: {', '.join(FACTORS)}")
        lo, hi = BOUNDS[name]
        if not (isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi):
            raise SpecError.one(None, f"factors.{name}", f"must be a number in [{lo}, {hi}]")
