"""Precisions a device has no matrix units for: refused, unless emulation is asked for.

PyTorch on a device without fp8 tensor cores (an A100, a CPU) cannot run ``torch._scaled_mm``; a
framework that "runs fp8" there upcasts to the nearest supported dtype. simtrain never picks another
precision's peak silently (that once priced fp8 on a CPU at its fp32 rate with no word in the
report): the config must say ``emulate_precision=True``, and the report then says which rate was used.
"""

from __future__ import annotations

from simtrain.cost.ceilings import EMULATED_SOURCE
from simtrain.cost.compute import matrix_peak_flops_per_s
from simtrain.errors import SimtrainError
from simtrain.glossary import DType, Mark
from simtrain.specs.base import Sourced

__all__ = ["EMULATED_SOURCE", "emulated_cluster", "emulation_warning"]

#: what an emulating framework upcasts each dtype to, nearest first
_UPCAST = {DType.FP8: (DType.BF16, DType.FP16, DType.FP32), DType.FP16: (DType.BF16, DType.FP32),
           DType.BF16: (DType.FP16, DType.FP32)}


def _native(device, dtype: DType) -> bool:
    try:
        matrix_peak_flops_per_s(device, dtype)
    except SimtrainError:
        return False
    return True


def emulated_cluster(cluster, dtype: DType, emulate: bool):
    """``cluster`` unchanged when its device runs ``dtype``; with ``emulate`` a cluster whose device
    runs ``dtype`` at the nearest upcast dtype's peak (its source says so); otherwise a clear error."""
    device = cluster.device
    if _native(device, dtype):
        return cluster
    listed = ", ".join(d.value for d in device.peaks_flops_per_s)
    if not emulate:
        raise SimtrainError(f"device {device.name!r} has no {dtype.value} matrix units (it lists {listed}); "
                            "set emulate_precision=True to cost it upcast, as a framework without them runs it")
    for alt in _UPCAST.get(dtype, ()):
        if _native(device, alt):
            peak = matrix_peak_flops_per_s(device, alt)
            entry = Sourced[float](value=peak, source=f"{EMULATED_SOURCE}: upcast to {alt.value}", mark=Mark.D)
            new = device.model_copy(update={"peak_flops_per_s": {**device.peak_flops_per_s, dtype: entry}})
            return cluster.model_copy(update={"node": cluster.node.model_copy(update={"device": new})})
    raise SimtrainError(f"device {device.name!r} has no {dtype.value} matrix units and no dtype to emulate "
                        f"it with (it lists {listed})")


def emulation_warning(device, dtype: DType) -> str | None:
    """The report's line when ``dtype`` ran emulated or at another dtype's rate on ``device``."""
    entry = device.peaks_flops_per_s.get(dtype)  # an FPGA's derived peaks count as listed
    if entry is not None and entry.source.startswith(EMULATED_SOURCE):
        return f"{dtype.value} is emulated on {device.name} ({entry.source.split(': ', 1)[-1]}); MFU uses that rate"
    if entry is None and dtype is not DType.TF32:
        used = matrix_peak_flops_per_s(device, dtype)
        alt = next((d.value for d, s in device.peaks_flops_per_s.items() if s.value == used), "another dtype")
        return f"{device.name} lists no {dtype.value} peak; matmuls are costed at its {alt} rate"
    return None
