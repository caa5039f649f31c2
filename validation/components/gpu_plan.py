"""What a GPU component check runs and records (shared by gpu_check.py, which plans, compares and
reports, and gpu_bench.py, which times on CUDA): the shapes and sizes, one measured point, the plan,
and the spread of repeated calls. Its own module so the two need not import each other."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from validation.components import data

__all__ = ["COMPONENTS", "TRANSFORMER_M", "TRANSFORMER_NK", "ATTENTION_SEQS", "HEAD_DIM", "BACKEND_KERNEL",
           "STREAM_ELEMENTS", "ALLREDUCE_SIZES", "ALLREDUCE_ENV", "Measurement", "Plan", "spread"]

COMPONENTS = ("gemm", "attention", "hbm", "allreduce")
TRANSFORMER_M = (2048, 4096, 8192)
TRANSFORMER_NK = ((6144, 4096), (4096, 4096), (14336, 4096), (4096, 14336))
"""Llama-3-8B projections as N × K: QKV (32 query + 2·8 kv heads of 128), output, MLP up/gate, MLP down."""
ATTENTION_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIM = 128
BACKEND_KERNEL = {"flash": "sdpa", "cudnn": "cudnn"}
"""SDPA backend → the profile's attention kernel family it runs (PyTorch's flash backend is FA2: ``sdpa``)."""
STREAM_ELEMENTS = data.BABELSTREAM_ARRAY_BYTES // 8
ALLREDUCE_SIZES = tuple(data.MIB * 2 ** i for i in range(11))
ALLREDUCE_ENV = {"ring": {"NCCL_NVLS_ENABLE": "0"}, "nccl": {}}


@dataclass(frozen=True)
class Measurement:
    """One measured point: ``params`` name the shape (JSON values), ``measured`` is the median."""

    component: str  # gemm-bf16, gemm-fp8, attention-flash, attention-cudnn, hbm, allreduce-ring, allreduce-nccl
    label: str
    params: dict
    measured: float
    spread: float
    unit: str


@dataclass(frozen=True)
class Plan:
    gemm: tuple[tuple[str, int, int, int], ...]  # (dtype, m, n, k)
    attention_seqs: tuple[int, ...]
    allreduce_sizes: tuple[int, ...]
    trials: int
    components: tuple[str, ...] = COMPONENTS


def spread(times: list[float]) -> tuple[float, float]:
    """(median, (max - min) / median) of per-call times."""
    med = statistics.median(times)
    return med, (max(times) - min(times)) / med
