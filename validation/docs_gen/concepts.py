"""The glossary table of docs/concepts.md, generated from :mod:`simtrain.glossary`: one row per member of
every enum, with the meaning below (a member without one fails ``tests/unit/test_docs_concepts.py``)."""

from __future__ import annotations

import inspect
from enum import Enum

from simtrain import glossary

__all__ = ["MEANINGS", "glossary_enums", "glossary_markdown", "concepts_with_glossary", "START", "END"]

START, END = "<!-- glossary:start (generated: python -m validation.docs_gen concepts.md) -->", "<!-- glossary:end -->"

MEANINGS: dict[str, str] = {
    "Axis.dp": "data parallelism: replicas of the model on different samples, gradients summed",
    "Axis.tp": "tensor parallelism: each matmul's weights split over ranks (Megatron-LM)",
    "Axis.pp": "pipeline parallelism: consecutive layers on different ranks, micro-batches in flight",
    "Axis.cp": "context parallelism: each sequence split over ranks (ring attention)",
    "Axis.ep": "expert parallelism: the experts of an MoE layer spread over ranks",
    "Phase.fw": "forward pass",
    "Phase.agrad": "backward, gradient with respect to the activations (input gradient)",
    "Phase.wgrad": "backward, gradient with respect to the weights",
    "Phase.optim": "optimizer step",
    "Phase.recompute": "forward work re-run during the backward (activation recomputation)",
    "DType.fp64": "IEEE double, 8 B", "DType.fp32": "IEEE single, 4 B",
    "DType.tf32": "fp32 storage, 10-bit-mantissa tensor-core matmul rate", "DType.bf16": "bfloat16, 2 B, fp32's range",
    "DType.fp16": "IEEE half, 2 B (needs loss scaling)", "DType.fp8": "8-bit float (E4M3 / E5M2), 1 B",
    "DType.fp4": "4-bit float (E2M1) with block scales (NVFP4, MXFP4), ½ B",
    "DType.int8": "8-bit integer, 1 B", "DType.int64": "64-bit integer (indices), 8 B", "DType.bool": "1 B flag (masks)",
    "DeviceKind.gpu": "GPU (NVIDIA, AMD)", "DeviceKind.tpu": "Google TPU (MXU systolic arrays, ICI torus)",
    "DeviceKind.fpga": "FPGA card (DSP-slice peak, on-chip BRAM/URAM)",
    "DeviceKind.wafer": "wafer-scale engine (Cerebras; weights may stream from off-wafer memory)",
    "DeviceKind.cpu": "host CPU", "DeviceKind.asic": "other training ASIC (Gaudi, Trainium)",
    "LinkKind.nvlink": "NVIDIA GPU-to-GPU link", "LinkKind.nvswitch": "NVIDIA NVLink switch fabric",
    "LinkKind.pcie": "PCI Express", "LinkKind.infiniband": "InfiniBand network",
    "LinkKind.ethernet": "Ethernet (RoCE) network", "LinkKind.ici": "TPU inter-chip interconnect",
    "LinkKind.swarmx": "Cerebras SwarmX broadcast/reduce fabric", "LinkKind.infinity_fabric": "AMD Infinity Fabric",
    "LinkKind.neuronlink": "AWS NeuronLink", "LinkKind.loopback": "a device to itself (no network)",
    "Precision.fp32": "everything fp32", "Precision.tf32": "fp32 with TF32 matmuls",
    "Precision.fp16": "fp16 compute + fp32 master weights + loss scaling",
    "Precision.bf16": "bf16 compute + fp32 master weights",
    "Precision.fp8": "fp8 matmuls, bf16 elsewhere, fp32 master weights (Transformer Engine)",
    "Precision.mxfp8": "fp8 matmuls with a scale per 32 values (OCP microscaling), at the fp8 rate; else as fp8",
    "Precision.fp4": "4-bit (NVFP4) matmuls, bf16 elsewhere, fp32 master weights (NVIDIA's NVFP4 recipe)",
    "OptimizerKind.sgd": "plain SGD (no state)", "OptimizerKind.momentum": "SGD with momentum (1 state)",
    "OptimizerKind.rmsprop": "RMSprop (1 state)", "OptimizerKind.adam": "Adam (2 states: m, v)",
    "OptimizerKind.adamw": "Adam with decoupled weight decay (2 states)",
    "OptimizerKind.adafactor": "Adafactor (factored second moment)",
    "Recompute.none": "keep every activation the backward needs",
    "Recompute.selective": "recompute the attention core only (Korthikanti et al. 2022), or the listed modules",
    "Recompute.full": "keep only block inputs; recompute each block's forward in the backward",
    "Recompute.selective-op": "torchtitan's per-op selective AC: keep matmul outputs except every second one, "
                              "and attention's; recompute the rest",
    "PipelineSchedule.gpipe": "all forwards, then all backwards (Huang et al. 2019)",
    "PipelineSchedule.1f1b": "one forward, one backward in steady state (PipeDream-Flush / Megatron-LM)",
    "PipelineSchedule.interleaved-1f1b": "1F1B over v model chunks per rank (bubble ÷ v)",
    "PipelineSchedule.zb-h1": "1F1B with the backward split into input- and weight-gradient passes, the weight "
                              "passes deferred into the bubble (Qi et al. 2024)",
    "PipelineSchedule.dualpipev": "two chunks per rank in a V, overlapped forward/backward pairs hiding their "
                                  "communication (DeepSeek-V3 DualPipe, V-shaped)",
    "Bottleneck.compute": "matrix / vector units busy: the step is compute-bound",
    "Bottleneck.memory_bandwidth": "memory-bound ops dominate", "Bottleneck.communication": "exposed collectives dominate",
    "Bottleneck.data": "the input pipeline cannot keep up", "Bottleneck.bubble": "pipeline fill and drain dominate",
    "OpClass.matmul": "dense matrix multiply (linear, bmm)", "OpClass.conv": "convolution",
    "OpClass.attention": "fused or materialised attention core", "OpClass.elementwise": "activation, dropout, add",
    "OpClass.norm": "LayerNorm, RMSNorm, BatchNorm", "OpClass.reduction": "softmax, loss, sums",
    "OpClass.embedding": "table lookup", "OpClass.memory": "copies, transposes, concatenation (bytes only)",
    "Mark.V": "verified against a primary source", "Mark.V2": "from a secondary source",
    "Mark.D": "derived by a named formula from other numbers", "Mark.U": "unverified",
}


def glossary_enums() -> list[type[Enum]]:
    return [obj for name in glossary.__all__ if inspect.isclass(obj := getattr(glossary, name)) and issubclass(obj, Enum)]


def glossary_markdown() -> str:
    rows = ["| term | value | meaning |", "|---|---|---|"]
    for enum in glossary_enums():
        doc = inspect.getdoc(enum) or ""
        if doc and doc != inspect.getdoc(glossary._StrEnum) and "An enumeration" not in doc:
            rows.append(f"| **{enum.__name__}** | | {doc.splitlines()[0]} |")
        else:
            rows.append(f"| **{enum.__name__}** | | |")
        for member in enum:
            rows.append(f"| | `{member.value}` | {MEANINGS[f'{enum.__name__}.{member.value}']} |")
    return "\n".join(rows)


def concepts_with_glossary(text: str) -> str:
    """``text`` with the part between START and END replaced by :func:`glossary_markdown`."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{glossary_markdown()}\n{END}{tail}"
