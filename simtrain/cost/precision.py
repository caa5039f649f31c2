"""Precision regimes: which ops run in which dtype, and how many bytes each kind of tensor takes.

Mixed precision (Micikevicius et al. 2018, "Mixed Precision Training"): 16-bit weights, activations
and gradients for compute, fp32 master weights and fp32 optimizer state, fp32 accumulation inside
the matmuls, loss scaling for fp16 (a per-step scale/unscale pass and an overflow check). fp8
(Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; Transformer Engine): matmuls in fp8 with
per-tensor scales, everything else in bf16, activations saved in bf16. ZeRO (Rajbhandari et al.
2020, §3.1) gives the byte counts: 2 (16-bit params) + 2 (16-bit grads) + 12 (fp32 master, m, v).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.glossary import DType, Precision

__all__ = ["Regime", "regime"]


@dataclass(frozen=True, slots=True)
class Regime:
    """Bytes per element of each tensor role, and the dtypes ops run in."""

    precision: Precision
    matmul_dtype: DType
    """Dtype of matmul / conv / attention inputs (the tensor-core path)."""
    vector_dtype: DType
    """Dtype of elementwise / norm ops."""
    act_bytes: int
    """Bytes per saved activation element and per activation element moved."""
    weight_bytes: int
    """Bytes per element of the compute copy of the weights."""
    grad_bytes: int
    """Bytes per element of the gradient produced by the backward pass."""
    master_bytes: int
    """Bytes per element of a separate fp32 master copy (0 when the compute copy is the master)."""
    loss_scaling: bool
    """fp16 needs dynamic loss scaling: an extra unscale + inf/nan check pass over the gradients."""

    @property
    def state_bytes(self) -> int:
        """Optimizer-state element size: fp32 in every regime (mixed precision keeps states in fp32)."""
        return 4


_REGIMES = {
    Precision.FP32: Regime(Precision.FP32, DType.FP32, DType.FP32, 4, 4, 4, 0, False),
    Precision.TF32: Regime(Precision.TF32, DType.TF32, DType.FP32, 4, 4, 4, 0, False),
    Precision.FP16: Regime(Precision.FP16, DType.FP16, DType.FP16, 2, 2, 2, 4, True),
    Precision.BF16: Regime(Precision.BF16, DType.BF16, DType.BF16, 2, 2, 2, 4, False),
    # fp8: matmul inputs cast to fp8 on the fly; the bf16 weight copy is kept for the other ops,
    # activations are saved in bf16 (Transformer Engine's default recipe).
    Precision.FP8: Regime(Precision.FP8, DType.FP8, DType.BF16, 2, 2, 2, 4, False),
    # MXFP8 (OCP Microscaling spec v1.0, 2023; Transformer Engine's MXFP8BlockScaling recipe on Blackwell):
    # fp8 elements with one e8m0 scale per 32, at the fp8 tensor-core rate; the rest as fp8's recipe
    Precision.MXFP8: Regime(Precision.MXFP8, DType.FP8, DType.BF16, 2, 2, 2, 4, False),
    # 4-bit training (NVIDIA, "Pretraining Large Language Models with NVFP4", 2025): the GEMMs' inputs
    # quantised to NVFP4 on the fly (forward, data- and weight-gradient GEMMs), bf16 weights kept for
    # the other ops, activations saved in bf16, fp32 master weights and optimizer state
    Precision.FP4: Regime(Precision.FP4, DType.FP4, DType.BF16, 2, 2, 2, 4, False),
}


def regime(precision: Precision | str) -> Regime:
    return _REGIMES[Precision(precision)]
