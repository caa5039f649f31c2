"""FPGA execution: layer-pipelined dataflow vs time-multiplexed, and whether a design fits on chip.

An FPGA has no fixed matrix engine: its peak is what a design builds out of DSP slices,
``peak(dtype) = DSP count × FMA per DSP per clock × 2 × design clock`` (``MatrixUnit.
derived_peak_flops_per_s``; hardware.md §6). Two ways to map a network onto those DSPs
(``Device.execution``):

* **time-multiplexed** (the default; Vitis-AI DPU style): one engine of all the DSPs runs the layers one
  after another, weights and activations streamed from HBM/DDR. Each op pays the kind's efficiency
  ramp (``half_flops``: a small op does not fill the engine) and a host-driven launch; costed by the
  ordinary roofline (:mod:`simtrain.cost.compute`).
* **layer-pipelined dataflow** (FINN, Umuroglu et al., FPGA 2017; hls4ml, Duarte et al., JINST 2018):
  every layer is its own pipeline stage with a DSP share sized to its work and its weights resident in
  BRAM/URAM; samples flow through back to back. With DSPs split in proportion to FLOPs every stage
  takes ``T = F / (P·e)`` per sample (F the whole network's FLOPs, P the peak, e the ceiling), so the
  steady-state throughput is one sample per ``max_l T_l`` — the slowest stage, which only whole-DSP
  rounding makes slower than ``T`` — and it holds at batch 1 (no engine is ever under-filled). The
  price: the weights must fit on chip, and filling the pipeline costs ``(L − 1)`` stage times per
  batch. The estimate path prices the steady state (``compute.dataflow_efficiency`` and the on-chip
  memory leg); :func:`layer_pipeline` evaluates the stage balance and the fill, two ways of one number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.cost.compute import device_efficiency, matmul_ceiling, matrix_peak_flops_per_s
from simtrain.glossary import DType, OpClass

__all__ = ["on_chip_tier", "DataflowFit", "dataflow_fit", "execution_problems", "PipelinePlan", "layer_pipeline",
           "execution_note"]


def on_chip_tier(device):
    """The device's on-chip SRAM tier (BRAM/URAM on an FPGA), or None."""
    return next((t for t in device.memory if t.level == "sram"), None)


@dataclass(frozen=True, slots=True)
class DataflowFit:
    """Weights a layer-pipelined design keeps on chip against the BRAM/URAM capacity."""

    weights_bytes: float
    on_chip_bytes: float

    @property
    def fits(self) -> bool:
        return self.weights_bytes <= self.on_chip_bytes


def dataflow_fit(param_count: float, weight_bytes: float, device, shards: int = 1) -> DataflowFit:
    """Each rank's weights (``param_count / shards`` × ``weight_bytes``) against on-chip capacity."""
    tier = on_chip_tier(device)
    cap = 0.0 if tier is None else tier.usable_bytes
    return DataflowFit(param_count / max(1, shards) * weight_bytes, cap)


def execution_problems(model, cluster, cfg, weight_bytes: float) -> list[str]:
    """Why ``cfg`` cannot run layer-pipelined on the cluster's FPGA ([] when it can or does not apply)."""
    device = cluster.device
    if device.execution != "layer_pipelined":
        return []
    fit = dataflow_fit(model.param_count, weight_bytes, device, cfg.tp * cfg.pp)
    if fit.fits:
        return []
    return [f"layer-pipelined execution on {device.name} keeps every weight on chip: "
            f"{fit.weights_bytes / 1e6:.1f} MB per rank exceed the {fit.on_chip_bytes / 1e6:.1f} MB of "
            f"BRAM/URAM (use execution: time_multiplexed, or shard with tp/pp)"]


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    """One layer-pipelined pass of ``samples`` samples: DSPs per stage, stage seconds, the slowest stage."""

    dsps: tuple[int, ...]
    stage_s: tuple[float, ...]
    samples: int

    @property
    def interval_s(self) -> float:
        """Seconds between samples in steady state: the slowest stage."""
        return max(self.stage_s)

    @property
    def fill_s(self) -> float:
        """Filling and draining the pipeline: (stages − 1) intervals."""
        return (len(self.stage_s) - 1) * self.interval_s

    @property
    def seconds(self) -> float:
        return self.samples * self.interval_s + self.fill_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds


def layer_pipeline(stage_flops: list[float], device, dtype: DType | str, samples: int) -> PipelinePlan:
    """Split the DSPs over stages in proportion to their FLOPs per sample (whole DSPs, at least one
    each: largest remainder), then ``T_l = F_l / (P · d_l / D · e)`` with e the matmul ceiling."""
    unit = device.matrix_unit
    dtype = DType(dtype)
    total_dsps = int(unit.units_count.value)
    if len(stage_flops) > total_dsps:
        raise ValueError(f"{len(stage_flops)} stages need at least one DSP each; {device.name} has {total_dsps}")
    work = sum(stage_flops)
    exact = [total_dsps * f / work for f in stage_flops]
    dsps = [max(1, math.floor(x)) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True):
        if sum(dsps) >= total_dsps:
            break
        dsps[i] += 1
    eff = device_efficiency(device)
    ceiling = matmul_ceiling(eff.curve(OpClass.MATMUL), OpClass.MATMUL, dtype, device, eff)
    per_dsp = matrix_peak_flops_per_s(device, dtype) / total_dsps * ceiling
    stage_s = tuple(f / (d * per_dsp) for f, d in zip(stage_flops, dsps, strict=True))
    return PipelinePlan(tuple(dsps), stage_s, int(samples))


def execution_note(device, model=None, weight_bytes: float = 2.0) -> str | None:
    """The report's line on how an FPGA runs the model (None for other devices)."""
    if device.kind.value != "fpga":
        return None
    mode = device.execution or "time_multiplexed"
    if mode == "time_multiplexed":
        return (f"{device.name} runs time-multiplexed: one DSP engine executes the layers in turn, weights "
                f"streamed from {device.main_tier.name}; small ops pay the efficiency ramp "
                "(execution: layer_pipelined keeps them at the ceiling if the weights fit on chip)")
    tier = on_chip_tier(device)
    used = "" if model is None else f" ({model.param_count * weight_bytes / 1e6:.1f} MB of weights"
    used += "" if model is None else f" in {tier.usable_bytes / 1e6:.1f} MB of {tier.name})"
    return (f"{device.name} runs layer-pipelined: each layer a pipeline stage with resident weights{used}; "
            "steady-state throughput, pipeline fill not included")
