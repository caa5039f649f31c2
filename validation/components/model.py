"""What simtrain's own cost functions predict for each component measurement.

Every prediction goes through the function the estimator uses: ``compute_seconds`` (GEMM, with the
matrix unit's ``alignment_factor``), ``attention_kernel_seconds`` (fused attention), ``memory_seconds``
(HBM streaming) and ``collective_time`` on the node's own NVSwitch topology (all-reduce busbw), so a
fitted number means what the model does with it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import simtrain as st
from simtrain.cost.collectives import collective_time
from simtrain.cost.compute import attention_kernel_seconds, compute_seconds, memory_seconds
from simtrain.glossary import DType, OpClass
from simtrain.graph.op import Gemm
from validation.components.data import (
    BABELSTREAM_ARRAY_BYTES,
    AttentionPoint,
    BusbwPoint,
    GemmPoint,
    StreamPoint,
)

__all__ = ["NODE_CLUSTER", "Comparison", "device", "node_topology", "gemm_tflops", "attention_tflops",
           "stream_tbps", "busbw_gbps", "compare", "ATTENTION_TOKENS", "ATTENTION_WIDTH"]

NODE_CLUSTER = {"a100-sxm4-80gb": "dgx-a100-80gb", "a100-sxm4-40gb": "dgx-a100-40gb",
                "h100-sxm5-80gb": "dgx-h100", "h200-sxm-141gb": "hgx-h200"}
"""The shipped 8-GPU node (as a one-node cluster) whose NVSwitch topology the all-reduce runs on."""

ATTENTION_TOKENS = 16 * 1024
"""B·S = 16k tokens and H·D = 2048 in the FA3-paper setup (components.md §2); the throughput of the
kernel curve does not depend on them, only the FLOP count does."""
ATTENTION_WIDTH = 2048


@functools.lru_cache(maxsize=16)
def device(name: str) -> st.Device:
    return st.load_device(name)


@functools.lru_cache(maxsize=32)
def node_topology(device_name: str, in_network: bool = False):
    """The dp group of all 8 GPUs of one node: what the estimator builds for an 8-GPU collective.
    ``in_network=True`` marks the NVSwitch NVLS-capable (not the estimator's default)."""
    from simtrain.parallel.topology import group_topology
    cluster = st.load_cluster(NODE_CLUSTER[device_name], nodes=1)
    return group_topology(cluster, {"dp": 8}, "dp", in_network_reduction=in_network)


def gemm_tflops(p: GemmPoint, dev: st.Device, eff) -> float:
    flops = 2.0 * p.m * p.n * p.k
    t = compute_seconds(flops, OpClass.MATMUL, dev, DType(p.dtype), eff, Gemm(p.m, p.n, p.k), p.m)
    return flops / t / 1e12


def attention_fw_flops(seq: int, causal: bool) -> float:
    """Forward FLOPs the kernel executes: 4·B·S²·H·D, halved when causal (components.md §2)."""
    batch = ATTENTION_TOKENS / seq
    return 4.0 * batch * seq * seq * ATTENTION_WIDTH / (2.0 if causal else 1.0)


def attention_tflops(p: AttentionPoint, dev: st.Device, eff, kernel) -> float:
    """Throughput of the kernel curve at the point's phase, sequence length and mask (bf16)."""
    f = attention_fw_flops(p.seq, p.causal)
    t_fw = attention_kernel_seconds(f, "fw", p.seq, p.causal, kernel, dev, DType.BF16, eff)
    t_bw = attention_kernel_seconds(2.5 * f, "bw", p.seq, p.causal, kernel, dev, DType.BF16, eff)
    if p.phase == "fw":
        return f / t_fw / 1e12
    if p.phase == "bw":
        return 2.5 * f / t_bw / 1e12
    return 3.5 * f / (t_fw + t_bw) / 1e12


def stream_tbps(p: StreamPoint, dev: st.Device, eff) -> float:
    moved = p.arrays_moved * BABELSTREAM_ARRAY_BYTES
    return moved / memory_seconds(moved, dev, eff) / 1e12


def busbw_gbps(p: BusbwPoint, device_name: str, eff, in_network: bool = False) -> float:
    topo = node_topology(device_name, in_network)
    return collective_time(p.kind, p.size_bytes, topo, efficiency=eff).busbw_bytes_per_s / 1e9


@dataclass(frozen=True)
class Comparison:
    """One data point against the model: ``error`` = modelled / measured − 1."""

    category: str  # gemm, attention, stream, busbw
    label: str
    measured: float
    modelled: float
    unit: str
    source: str
    mark: str
    fit: bool
    point: object

    @property
    def error(self) -> float:
        return self.modelled / self.measured - 1.0

    @property
    def log_error(self) -> float:
        return math.log(self.modelled / self.measured)


def compare(device_name: str, eff, data_device: str) -> list[Comparison]:
    """Every component point of ``data_device`` against ``device_name`` with efficiency ``eff``.
    All-reduce points measured with NVLS are compared on their shape (busbw over the sweep's
    largest-message busbw) since the estimator's node topology runs ring/tree (see derive.py)."""
    from validation.components import data
    dev = device(data_device)  # fractions of peak transfer; measured TFLOP/s and TB/s belong to data_device
    out = [Comparison("gemm", p.label, p.tflops, gemm_tflops(p, dev, eff), "TFLOP/s", p.source, p.mark, p.fit, p)
           for p in data.GEMM if p.device == data_device]
    for p in data.ATTENTION:
        kernel = eff.attention_kernels.get(p.kernel)
        if p.device == data_device and kernel is not None:
            out.append(Comparison("attention", p.label, p.tflops, attention_tflops(p, dev, eff, kernel), "TFLOP/s",
                                  p.source, p.mark, p.fit, p))
    out += [Comparison("stream", f"BabelStream {p.kernel}", p.tbps, stream_tbps(p, dev, eff), "TB/s", p.source,
                       p.mark, p.fit, p) for p in data.STREAM if p.device == data_device]
    return out + _busbw_comparisons(device_name, eff, data_device)


def _busbw_comparisons(device_name: str, eff, data_device: str) -> list[Comparison]:
    from validation.components import data
    out = []
    points = [p for p in data.BUSBW if p.device == data_device]
    for p in points:
        measured, modelled = p.busbw_gbps, busbw_gbps(p, device_name, eff)
        unit = "GB/s"
        if p.algorithm == "nvls":
            last = max((q for q in points if q.source == p.source and q.algorithm == "nvls"),
                       key=lambda q: q.size_bytes)
            measured, modelled = measured / last.busbw_gbps, modelled / busbw_gbps(last, device_name, eff)
            unit = "of sweep max"
        out.append(Comparison("busbw", p.label, measured, modelled, unit, p.source, p.mark, p.fit, p))
    return out
