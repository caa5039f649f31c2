"""Small, explicit inputs for the worked numbers of docs/formulas.md and docs/seed-examples.md.

Each helper builds a simtrain input (an op, a layer, a device with round numbers, a report) so that a
snippet on the page reads as one simtrain call. The demo device is invented on purpose — its numbers
are round and stated on the page — so a worked example does not move when a library spec is refined.
"""

from __future__ import annotations

import functools

import simtrain.cost.collectives as _collectives
import simtrain.cost.compute as _compute
import simtrain.cost.data_pipeline as _data_pipeline
import simtrain.cost.memory as _memory
import simtrain.cost.optimizer as _optimizer
import simtrain.cost.precision as _precision
import simtrain.graph.summary as _summary
import simtrain.parallel.partition as _partition
import simtrain.parallel.schedule as _schedule
import simtrain.sim.young_daly as _young_daly
from simtrain.cost.op_cost import shard_factors
from simtrain.glossary import DType, OpClass, PipelineSchedule
from simtrain.graph.op import Gemm, Op, PhaseCounts, Saved
from simtrain.parallel.hetero import estimate_heterogeneous
from simtrain.report.step_report import StepReport
from simtrain.specs.hardware import Device
from simtrain.specs.train import DataPipeline

__all__ = ["IMPORTS", "param_op", "gpt_layer", "gpt_model", "norm_stats_bytes", "demo_device", "peak_device",
           "demo_report", "estimate_heterogeneous",
           "DataPipeline", "PipelineSchedule", "OpClass", "DType", "StepReport", "make_op", "Gemm", "shard_factors"]

IMPORTS = (_collectives, _compute, _data_pipeline, _memory, _optimizer, _precision, _summary, _partition,
           _schedule, _young_daly)

from simtrain.graph.rules import make_op  # noqa: E402  (re-exported for the snippets)


def param_op(n: int, name: str = "w") -> Op:
    """A 1 × n bias-free linear layer: stands in for n trainable parameters."""
    f = 2.0 * n
    return Op(name=name, kind="linear", op_class=OpClass.MATMUL, block="layers.0", flops=PhaseCounts(f, f, f),
              act_read=PhaseCounts(1, n, n + 1), act_write=PhaseCounts(n, 1, 0),
              weight_read=PhaseCounts(n, n, 0), weight_write=PhaseCounts(0, 0, n), param_count=n,
              saved=Saved(act=1), shapes=((1, 1),), out_shape=(1, n), gemm=Gemm(1, n, 1))


@functools.cache
def gpt_model(layers: int, seq: int, hidden: int, heads: int, vocab: int = 51200):
    """A GPT (LayerNorm, GeLU, dropout 0.1, materialised attention: the layer of Korthikanti et al.
    2022 Table 2)."""
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    spec = ModelSpec.model_validate({
        "name": f"gpt-{layers}x{hidden}", "family": "transformer", "seq_len": seq,
        "transformer": {"layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab, "max_positions": seq,
                        "activation": "gelu", "norm": "layernorm", "position": "learned",
                        "tied_embeddings": True, "biases": True, "causal": True, "dropout": 0.1,
                        "flash_attention": False, "head": "lm"}})
    return build_model(spec)


def gpt_layer(seq: int, hidden: int, heads: int) -> tuple[Op, ...]:
    """The ops of one layer of :func:`gpt_model`, per sample."""
    return tuple(op for op in gpt_model(2, seq, hidden, heads).ops if op.block == "layers.0")


def norm_stats_bytes(layer: tuple[Op, ...], micro_batch: int, tp: int, sp: bool) -> float:
    """LayerNorm's fp32 mean and rstd that simtrain saves and Korthikanti et al.'s Table 2 leaves out
    (sharded along the sequence under sequence parallelism)."""
    return sum(op.saved.fixed_bytes for op in layer if op.kind == "layernorm") * micro_batch / (tp if sp else 1)


def _s(value, source="invented for the docs' worked examples"):
    return {"value": value, "source": source, "mark": "U"}


@functools.cache
def demo_device() -> Device:
    """An invented accelerator with round numbers: 1000 TFLOP/s bf16 and 100 TFLOP/s fp32 peaks,
    80 GB of HBM at 3 TB/s, 700 W TDP (100 W idle); efficiencies: matmul 80 % of peak with a
    half-saturation size of 10 GFLOP, elementwise 90 %, 90 % of the memory bandwidth with a
    half-saturation transfer of 1 MB, 5 µs launch overhead, 90 % of link bandwidth."""
    curve = {c.value: {"peak_fraction": 0.9, "half_flops": 0.0} for c in OpClass}
    curve["matmul"] = {"peak_fraction": 0.8, "half_flops": 1e10}
    return Device.model_validate({
        "name": "demo", "kind": "gpu",
        "peak_flops_per_s": {"bf16": _s(1000e12), "fp16": _s(1000e12), "fp32": _s(100e12)},
        "memory": [{"name": "hbm", "level": "hbm", "capacity_bytes": _s(80e9), "bandwidth_bytes_per_s": _s(3e12)}],
        "tdp_w": _s(700), "idle_power_w": _s(100), "price_per_hour": _s(2.0),
        "efficiency": {"compute": curve, "memory_bandwidth_fraction": 0.9, "memory_half_bytes": 1e6,
                       "launch_overhead_s": 5e-6, "link_bandwidth_fraction": 0.9},
    })


@functools.cache
def peak_device(peak_flops_per_s: float) -> Device:
    """The demo device with another bf16 / fp32 peak (for replicas of different speeds)."""
    spec = demo_device().model_dump(mode="json", exclude_none=True)
    spec.update(name=f"demo-{peak_flops_per_s / 1e12:g}t",
                peak_flops_per_s={"bf16": _s(peak_flops_per_s), "fp32": _s(peak_flops_per_s)})
    return Device.model_validate(spec)


def demo_report(*, devices: int, step_time_s: float, model_flops: float, hardware_flops: float,
                peak_flops_per_s: float, breakdown: dict | None = None, tdp_w: float | None = None,
                idle_power_w: float | None = None, global_batch_size: int = 1,
                tokens_per_sample: int = 1) -> StepReport:
    """A StepReport holding just the numbers a rate, MFU/HFU or energy formula reads."""
    return StepReport(model_name="demo", cluster_name="demo", devices_count=devices, feasible=True, reasons=(),
                      step_time_s=step_time_s, global_batch_size=global_batch_size,
                      tokens_per_sample=tokens_per_sample, model_flops_per_step=model_flops,
                      hardware_flops_per_step=hardware_flops, peak_flops_per_s=peak_flops_per_s,
                      time_breakdown_s=breakdown or {}, memory=None, bottleneck="", bottleneck_reason="",
                      tdp_w=tdp_w, idle_power_w=idle_power_w)
