"""Optimizer memory and step time (memory-bound elementwise work over every trainable parameter).

State per parameter (fp32 elements): SGD 0, momentum 1 (velocity), RMSprop 1 (square average),
Adam / AdamW 2 (m, v; Kingma & Ba 2015), Adafactor: factored second moment, rows + cols per matrix
and no first moment by default (Shazeer & Stern 2018, §3-4). Mixed precision adds the fp32 master
copy (ZeRO, Rajbhandari et al. 2020 §3.1: 2 + 2 + 12 bytes per parameter for mixed-precision Adam).

Step traffic, from first principles (tensor passes over the parameter vector):
* fused / multi-tensor (one kernel reads every operand once and writes every result once):
  Adam reads p, g, m, v and writes p, m, v (7 passes; + 1 for the 16-bit copy in mixed precision);
* unfused (PyTorch's for-loop path: one kernel per elementwise op and tensor): Adam
  lerp_ (m: 3), mul_ + addcmul_ (v: 2 + 3), sqrt + div + add_ (denominator, temporaries: 2 + 2 + 2),
  addcdiv_ (p: 4) = 18 passes, 8 kernels with the step counter; AdamW adds mul_ (decay: 2) = 20.
The chapter (§8.3.3) states 5× vs 2× parameter size; its ratio 2.5 agrees with ours (18/7 ≈ 2.6),
its absolute multiples do not (docs/chapter-disagreements.md).

Implementation (``TrainConfig.optimizer_impl``), as PyTorch 2.x runs them (torch/optim/adam.py etc.):
* ``for-loop`` (``_single_tensor_*``): per parameter tensor, the op sequence of :data:`OP_SEQUENCES`
  — each op one kernel, reading and writing whole tensors (temporaries included: ``sqrt()`` and the
  division write new tensors); bytes = Σ passes × 4 B × params, kernels = ops × tensors;
* ``foreach`` (``_multi_tensor_*``): the same op sequence as ``torch._foreach_*`` ops, so the same
  bytes; on CUDA each op is a multi-tensor kernel (ATen MultiTensorApply.cuh: at most
  ``depth_to_max_tensors = {110, 64, 48, 36, 30}`` tensors for 1–5 tensor lists and 320 chunks of
  65,536 elements per launch), on CPU the foreach ops fall back to a per-tensor loop (one kernel per
  op per tensor, like the for-loop without the Python);
* ``fused`` (``_fused_*``): one pass, every operand read once and every result written once
  (``fused_passes``); on CUDA one multi-tensor kernel of depth 4 (p, g, m, v) per 36 tensors, on CPU
  one kernel per tensor.
``None`` is what PyTorch picks (``torch.optim.optimizer._default_to_fused_or_foreach``): fused only
when asked; foreach when every parameter is on a foreach device (cuda, xpu, mtia), else the
for-loop — so foreach on GPUs, the for-loop on CPUs. The legacy ``fused_optimizer`` flag, when set
explicitly (or by a stack), means ``fused`` (True) or ``for-loop`` (False).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.glossary import OptimizerKind

__all__ = ["OptimizerTraits", "traits", "state_elements", "step_passes", "OPTIMIZER_IMPLS", "OP_SEQUENCES",
           "resolve_impl", "impl_of_config", "impl_passes", "impl_kernels", "FOREACH_DEVICE_KINDS",
           "tensor_overhead_key", "tensor_overhead_seconds", "step_overhead_seconds"]


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
    OptimizerKind.RMSPROP: OptimizerTraits(1, 5, 13, 6, 6),           # unfused: OP_SEQUENCES below
    OptimizerKind.ADAM: OptimizerTraits(2, 7, 18, 8, 12),
    OptimizerKind.ADAMW: OptimizerTraits(2, 7, 20, 9, 13),
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


OPTIMIZER_IMPLS = ("for-loop", "foreach", "fused")
FOREACH_DEVICE_KINDS = frozenset({"gpu"})
"""Device kinds whose PyTorch backend has multi-tensor (foreach) kernels: cuda / xpu / mtia are GPUs here."""

_SGD = (("add_ p", 3, 2),)  # param.add_(grad, alpha=-lr): read p, g; write p
_ADAM = (("step += 1", 0, 1), ("lerp_ m", 3, 2), ("mul_ v", 2, 1), ("addcmul_ v", 3, 3), ("sqrt v", 2, 2),
         ("div", 2, 1), ("add_ eps", 2, 1), ("addcdiv_ p", 4, 3))
OP_SEQUENCES: dict[OptimizerKind, tuple[tuple[str, int, int], ...]] = {
    # (op, passes = tensors read + written in parameter-vector units, tensor lists = foreach depth);
    # default hyper-parameters: no weight decay (Adam, SGD, RMSprop), no Nesterov, not centred
    OptimizerKind.SGD: _SGD,
    OptimizerKind.MOMENTUM: (("mul_ buf", 2, 1), ("add_ buf", 3, 2)) + _SGD,
    OptimizerKind.RMSPROP: (("step += 1", 0, 1), ("mul_ sq", 2, 1), ("addcmul_ sq", 3, 3), ("sqrt sq", 2, 2),
                            ("add_ eps", 2, 1), ("addcdiv_ p", 4, 3)),
    OptimizerKind.ADAM: _ADAM,
    OptimizerKind.ADAMW: (("mul_ p (decoupled decay)", 2, 1),) + _ADAM,
}
_MAX_TENSORS = (110, 64, 48, 36, 30)  # ATen MultiTensorApply.cuh depth_to_max_tensors, depth 1..5
_MAX_ELEMENTS = 320 * 65536  # depth_to_max_blocks × kChunkSize: elements one launch covers


def resolve_impl(impl: str | None, device_kind: str, fused_flag: bool | None = None) -> str:
    """The implementation that runs: ``impl`` when given; else the explicit legacy ``fused_flag``
    (True → fused, False → for-loop); else PyTorch's default for ``device_kind`` (module docstring)."""
    if impl is not None:
        if impl not in OPTIMIZER_IMPLS:
            raise ValueError(f"optimizer_impl must be one of {', '.join(OPTIMIZER_IMPLS)} or None, got {impl!r}")
        return impl
    if fused_flag is not None:
        return "fused" if fused_flag else "for-loop"
    return "foreach" if str(device_kind) in FOREACH_DEVICE_KINDS else "for-loop"


def impl_of_config(cfg, device_kind: str) -> str:
    """:func:`resolve_impl` for a TrainConfig: its ``optimizer_impl``; else ``fused_optimizer`` when the
    user set it, else the stack's ``fused_optimizer`` when the stack sets one; else PyTorch's default."""
    flag = cfg.fused_optimizer if "fused_optimizer" in cfg.model_fields_set else None
    stack = getattr(cfg, "stack", None)
    if flag is None and stack is not None and not isinstance(stack, str):
        flag = getattr(stack, "fused_optimizer", None)
    elif flag is None and isinstance(stack, str):
        from simtrain.specs.stack import load_stack
        flag = load_stack(stack).fused_optimizer
    return resolve_impl(cfg.optimizer_impl, device_kind, flag)


def _sequence(kind: OptimizerKind | str) -> tuple[tuple[str, int, int], ...] | None:
    return OP_SEQUENCES.get(OptimizerKind(kind))


def impl_passes(kind: OptimizerKind | str, impl: str, has_master_copy: bool) -> int:
    """Tensor passes of one step under ``impl`` (+ 1 to write the 16-bit copy when a master exists)."""
    seq = _sequence(kind)
    if impl == "fused" or seq is None:  # Adafactor: the traits' counts (no per-op sequence here)
        return step_passes(kind, impl == "fused", has_master_copy)
    return sum(p for _, p, _ in seq) + (1 if has_master_copy else 0)


def _launches(tensors: int, elements: float, depth: int) -> int:
    by_tensors = math.ceil(tensors / _MAX_TENSORS[min(depth, len(_MAX_TENSORS)) - 1])
    return max(1, by_tensors, math.ceil(elements / _MAX_ELEMENTS))


def impl_kernels(kind: OptimizerKind | str, impl: str, tensors: int, elements: float, device_kind: str) -> int:
    """Kernels (launches / dispatches) of one step over ``tensors`` tensors of ``elements`` in all."""
    if tensors <= 0:
        return 0
    multi = str(device_kind) in FOREACH_DEVICE_KINDS
    seq = _sequence(kind)
    if impl == "fused":
        return _launches(tensors, elements, 4) if multi else tensors
    if seq is None:
        return traits(kind).unfused_kernels * tensors
    if impl == "foreach" and multi:
        return sum(_launches(tensors, elements, depth) for _, _, depth in seq)
    return len(seq) * tensors


def tensor_overhead_key(kind: OptimizerKind | str, impl: str) -> str:
    """The ``Efficiency.optimizer_tensor_overhead_s`` key of an optimizer under an implementation."""
    return f"{OptimizerKind(kind).value}/{impl}"


_SAME_HOST_CODE = {"adam": "adamw", "adamw": "adam", "sgd": "momentum", "momentum": "sgd"}
"""Optimizers whose step runs the same host code as another's (PyTorch's Adam and AdamW share their
functional implementation and kernels, AdamW adding the decoupled decay; SGD with and without
momentum one ``sgd`` function and fused kernel): one's fitted overheads stand for the other's where
only one was benched."""


def tensor_overhead_seconds(kind: OptimizerKind | str, impl: str, tensors: int, eff) -> float:
    """Host seconds of one step's per-tensor work beyond its kernel launches: ``tensors`` × the
    efficiency's fitted overhead for this optimizer and implementation, or for the optimizer sharing
    its host code (:data:`_SAME_HOST_CODE`); 0 where neither was fitted."""
    return max(tensors, 0) * _fitted(eff.optimizer_tensor_overhead_s, kind, impl)


def step_overhead_seconds(kind: OptimizerKind | str, impl: str, eff) -> float:
    """Host seconds of one step's own Python beyond its tensors (``Efficiency.optimizer_step_overhead_s``
    for this optimizer and implementation, or its twin's: :data:`_SAME_HOST_CODE`); 0 where not fitted."""
    return _fitted(eff.optimizer_step_overhead_s, kind, impl)


def _fitted(table: dict[str, float], kind: OptimizerKind | str, impl: str) -> float:
    value = table.get(tensor_overhead_key(kind, impl))
    twin = _SAME_HOST_CODE.get(OptimizerKind(kind).value)
    if value is None and twin is not None:
        value = table.get(tensor_overhead_key(twin, impl))
    return value or 0.0
