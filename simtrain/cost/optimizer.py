"""Optimizer memory and step time (memory-bound elementwise work over every trainable parameter).

State per parameter (fp32 elements): SGD 0, momentum 1 (velocity), RMSprop 1 (square average),
Adam / AdamW 2 (m, v; Kingma & Ba 2015), Adafactor: factored second moment, rows + cols per matrix
and no first moment by default (Shazeer & Stern 2018, §3-4). Mixed precision adds the fp32 master
copy (ZeRO, Rajbhandari et al. 2020 §3.1: 2 + 2 + 12 bytes per parameter for mixed-precision Adam).

Step traffic, from first principles (tensor passes over the parameter vector):
* fused / multi-tensor (one kernel reads every operand once and writes every result once):
  Adam reads p, g, m, v and writes p, m, v (7 passes; + 1 for the 16-bit copy in mixed precision);
* unfused (PyTorch's for-loop path: one kernel per elementwise op and tensor): Adam
  mul_ (weight decay), lerp_ (m), mul_ + addcmul_ (v), sqrt + div + add (denominator), addcdiv_ (p):
  about 16 passes.
The chapter (§8.3.3) states 5× vs 2× parameter size; its ratio 2.5 agrees with ours (16/7 ≈ 2.3),
its absolute multiples do not (docs/chapter-disagreements.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.glossary import OptimizerKind

__all__ = ["OptimizerTraits", "traits", "state_elements", "step_passes"]


@dataclass(frozen=True, slots=True)
class OptimizerTraits:
    states_per_param: float
    """fp32 state elements per parameter (Adafactor: computed per matrix instead)."""
    fused_passes: int
    """Tensor passes (reads + writes, in units of one fp32 parameter vector) of a fused step."""
    unfused_passes: int
    unfused_kernels: int
    """Kernels per parameter tensor on the unfused path (launch overhead)."""
    flops_per_param: int
    """Arithmetic per parameter (documented count: multiplies, adds, sqrt, divide)."""


_TRAITS = {
    OptimizerKind.SGD: OptimizerTraits(0, 3, 3, 1, 2),                 # read p, g; write p
    OptimizerKind.MOMENTUM: OptimizerTraits(1, 5, 8, 3, 4),            # + read/write velocity
    OptimizerKind.RMSPROP: OptimizerTraits(1, 5, 11, 5, 6),
    OptimizerKind.ADAM: OptimizerTraits(2, 7, 16, 7, 12),
    OptimizerKind.ADAMW: OptimizerTraits(2, 7, 16, 7, 13),
    OptimizerKind.ADAFACTOR: OptimizerTraits(0, 5, 14, 8, 14),          # row/col stats ≈ free in bytes
}


def traits(kind: OptimizerKind | str) -> OptimizerTraits:
    return _TRAITS[OptimizerKind(kind)]


def state_elements(kind: OptimizerKind | str, param_count: float, matrix_shape: tuple[int, int] | None = None) -> float:
    """fp32 optimizer-state elements for one parameter tensor."""
    kind = OptimizerKind(kind)
    if kind is OptimizerKind.ADAFACTOR:
        if matrix_shape is not None:
            rows, cols = matrix_shape
            return float(rows + cols)
        return float(param_count)  # vectors keep an unfactored second moment
    return traits(kind).states_per_param * param_count


def step_passes(kind: OptimizerKind | str, fused: bool, has_master_copy: bool) -> int:
    """Tensor passes of one optimizer step; + 1 to write the 16-bit compute copy when a master exists."""
    t = traits(kind)
    return (t.fused_passes if fused else t.unfused_passes) + (1 if has_master_copy else 0)
