"""fp8 GEMMs' casts: which ops run in fp8, and the memory-bound passes that cast their operands.

* ``runs_in_fp8``: the linear layers' GEMMs only (Transformer Engine, torchao ``Float8Linear``);
* ``fp8_cast_seconds``: per micro-batch, the passes over X, W and dY one GEMM phase casts, by the stack's
  scaling recipe (Transformer Engine's one cast-transpose pass per tensor; torchao's ``FP8_CAST_PASSES``),
  W left out where the stack casts it once a step;
* ``fp8_weight_cast_seconds``: that once-a-step weight cast (``Stack.fp8_weight_cache``), charged with the
  per-step work on the weights (parallel/stage_state.py).
"""

from __future__ import annotations

from simtrain.cost.compute import memory_seconds
from simtrain.cost.precision import Regime
from simtrain.glossary import DType, OpClass
from simtrain.graph.op import Gemm, Op

__all__ = ["FP8_CAST_PASSES", "CAST_PASS_BYTES", "CAST_TRANSPOSE_BYTES", "FP8_WEIGHT_CAST_BYTES", "runs_in_fp8", "fp8_cast_seconds", "fp8_weight_cast_seconds"]

FP8_CAST_PASSES = {"delayed": 1.0, "tensorwise": 1.5, "rowwise": 2.5}
"""Passes over a tensor to cast it to fp8, per recipe: delayed scaling (Transformer Engine's default:
amax from history, fused into the cast) one pass, which writes the transposed copy too
(:data:`CAST_TRANSPOSE_BYTES`); the torchao recipes in units of (read 16-bit + write 8-bit):
tensorwise current scaling (torchao's default) adds an amax read before the cast; rowwise (torchao)
reads for per-row amax and writes both the row- and the column-major fp8 copy the backward needs."""

CAST_TRANSPOSE_BYTES = 4.0
"""Bytes per element of Transformer Engine's ``fp8_cast_transpose_fused``: it reads the 16-bit tensor and
writes the fp8 copy and its transpose in one pass, 2 + 1 + 1 (module/linear.py: the input and the
weight in the forward, the output gradient in the backward; the weight-gradient GEMM reads the
transposed copies, so nothing is cast again)."""

CAST_PASS_BYTES = 3.0
"""Bytes per element of one torchao cast pass: read 16-bit, write 8-bit, 2 + 1."""

FP8_WEIGHT_CAST_BYTES = CAST_TRANSPOSE_BYTES
"""Bytes per weight element of the once-a-step fp8 weight cast (``Stack.fp8_weight_cache``): one
``fp8_cast_transpose_fused`` pass."""


def runs_in_fp8(op: Op, reg: Regime) -> bool:
    """fp8 runs only the linear layers' GEMMs (Transformer Engine / torchao Float8Linear): attention,
    convolutions and the vocab-parallel LM head stay in bf16 (TE keeps the output layer in high
    precision)."""
    return (reg.matmul_dtype is DType.FP8 and op.op_class is OpClass.MATMUL and op.gemm is not None
            and op.tp_split != "vocab")


def fp8_weight_cast_seconds(weight_elements: float, device, eff) -> float:
    """Seconds of casting a rank's ``weight_elements`` of one op to fp8 once (with its transpose), for a
    stack that casts them once a step (``Stack.fp8_weights_cast_per_step``): :data:`FP8_WEIGHT_CAST_BYTES`
    an element, plus one launch."""
    if weight_elements <= 0:
        return 0.0
    return memory_seconds(FP8_WEIGHT_CAST_BYTES * weight_elements, device, eff) + eff.launch_overhead_s


def fp8_cast_seconds(phase: str, gemm: Gemm, micro_batch: float, stack, device, eff) -> tuple[float, float]:
    """(seconds, kernels) of casting one fp8 GEMM phase's inputs under ``stack`` (None: delayed scaling,
    every forward casting W): forward X and W (X alone where the stack casts W once a step:
    :func:`fp8_weight_cast_seconds`), activation-grad dY (W's fp8 copy is reused).

    Delayed scaling (Transformer Engine) casts each tensor once with its transpose,
    :data:`CAST_TRANSPOSE_BYTES` an element, and the weight-gradient GEMM reads those transposed copies.
    The torchao recipes cast in passes of :data:`CAST_PASS_BYTES`, :data:`FP8_CAST_PASSES` of them,
    and the weight gradient casts transposed X and dY copies again (rowwise writes them at cast time,
    which its pass count already holds)."""
    recipe = stack.fp8_recipe if stack is not None else "delayed"
    weight_cached = stack is not None and stack.fp8_weights_cast_per_step
    x = gemm.m * micro_batch * gemm.k * gemm.batch
    w = 0.0 if weight_cached else gemm.n * gemm.k * gemm.batch
    dy = gemm.m * micro_batch * gemm.n * gemm.batch
    transposed_at_cast = recipe in ("delayed", "rowwise")
    elements = {"fw": x + w, "agrad": dy, "wgrad": 0.0 if transposed_at_cast else x + dy}[phase]
    if elements == 0:
        return 0.0, 0.0
    tensors = {"fw": 1 if weight_cached else 2, "agrad": 1, "wgrad": 2}[phase]
    if recipe == "delayed":
        bytes_moved = CAST_TRANSPOSE_BYTES * elements
    else:
        bytes_moved = CAST_PASS_BYTES * elements * (FP8_CAST_PASSES[recipe] if phase != "wgrad" else 1.0)
    return memory_seconds(bytes_moved, device, eff) + tensors * eff.launch_overhead_s, float(tensors)
