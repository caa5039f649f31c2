"""Sustained compute ceilings: the clock a device holds under a power limit, and the matmul ceiling of a
dtype that has its own (cost/compute.py multiplies both into every compute peak).

* ``power_clock_fraction``: the cube law of CMOS dynamic power under ``Device.power_limit_w``;
* ``compute_clock_fraction``: that times the profile's ``sustained_clock_fraction``;
* ``matmul_ceiling``: ``Efficiency.dtype_peak_fraction`` for a matmul in a dtype that has one (fp8's
  sustained ceiling is not the bf16 share of its doubled peak), else the curve's ``peak_fraction``.
"""

from __future__ import annotations

from simtrain.glossary import DType, OpClass
from simtrain.specs.hardware import ComputeCurve, Device, Efficiency

__all__ = ["power_clock_fraction", "compute_clock_fraction", "matmul_ceiling", "EMULATED_SOURCE"]

EMULATED_SOURCE = "emulated"
"""Source prefix of a peak the device runs by upcasting to another dtype (cost/emulation.py)."""


def power_clock_fraction(device: Device) -> float:
    """Clock under ``device.power_limit_w`` over the clock at ``tdp_w``, at most 1 (1 without a limit):
    ``((limit − idle) / (tdp − idle)) ** (1/3)``. Idle power (leakage, uncore; 0 when the spec gives
    none) does not move with the clock; the rest is CMOS dynamic power P = α·C·V²·f, and inside the
    DVFS range V ∝ f, so P − P_idle ∝ f³ (the cube law: Horowitz et al., "Low-power digital design",
    IEEE SLPE 1994). For parts run below the rating: NVIDIA's H100 PCIe / HBM2e boards at 350-500 W
    against the 700 W SXM5; torchtitan's H100 tables were measured at 500 W."""
    limit, tdp = device.power_limit_w, device.tdp_w
    if limit is None or tdp is None:
        return 1.0
    idle = device.idle_power_w.value if device.idle_power_w is not None else 0.0
    return min(1.0, ((limit.value - idle) / (tdp.value - idle)) ** (1.0 / 3.0))


def compute_clock_fraction(device: Device, eff: Efficiency) -> float:
    """Clock of every compute peak over the datasheet's: ``sustained_clock_fraction`` × power limit's."""
    return eff.sustained_clock_fraction * power_clock_fraction(device)


def matmul_ceiling(curve: ComputeCurve, op_class: OpClass, dtype: DType, device: Device, eff: Efficiency) -> float:
    """Large-op ceiling of ``op_class`` in ``dtype``: ``eff.dtype_peak_fraction[dtype]`` for a matmul in a
    dtype that has one and that the device runs natively (an emulated one, cost/emulation.py, runs as
    its upcast dtype), else ``curve.peak_fraction``."""
    own = eff.dtype_peak_fraction.get(dtype) if op_class is OpClass.MATMUL else None
    if own is None:
        return curve.peak_fraction
    entry = device.peak_flops_per_s.get(dtype)
    return curve.peak_fraction if entry is not None and entry.source.startswith(EMULATED_SOURCE) else own
