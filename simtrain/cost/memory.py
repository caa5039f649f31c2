"""Memory per device: weights, gradients, optimizer state, activations, buffers, overhead.

* weights: the compute copy (4 B fp32, 2 B in 16-bit regimes); ZeRO-3 / FSDP shards it over dp.
* gradients: 16-bit (or fp32) gradients of trainable parameters; ZeRO-2+ shards them over dp. With
  gradient accumulation in a 16-bit regime an fp32 accumulation buffer (4 B/param) is kept, as
  Megatron-LM's ``main_grad`` does.
* optimizer: fp32 master copy (16-bit regimes) + fp32 states (optimizer.py); ZeRO-1+ shards over dp
  (Rajbhandari et al. 2020, Fig. 1: (2 + 2 + K)·Ψ → 2Ψ + 2Ψ + KΨ/N_d → ... ).
* activations: bytes saved for backward × micro-batches in flight, under the recompute policy
  (none | selective: attention core recomputed | full: block inputs only | every-k blocks).
* buffers: the transient peak inside backward (the largest op's output-gradient + input-gradient
  working set, plus one re-materialised block under full recomputation), the input micro-batch on
  device, and gathered parameters under ZeRO-3.
* overhead: allocator fragmentation + framework workspace, an explicit fraction of usable capacity
  (TrainConfig.memory_overhead_fraction, 5 % by default: a documented allowance, not a measurement).
Frozen layers (TrainConfig.frozen_prefixes) have weights but no gradients or optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.cost.op_cost import saved_bytes, shard_factors
from simtrain.cost.optimizer import state_elements
from simtrain.cost.precision import Regime
from simtrain.glossary import OptimizerKind
from simtrain.graph.op import Op

__all__ = ["ParamMemory", "param_memory", "activation_bytes_per_microbatch", "attention_core_saved",
           "block_input_elements", "checkpoint_bytes", "largest_gradient_bytes", "recompute_window_bytes"]


@dataclass(frozen=True, slots=True)
class ParamMemory:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    params_count: float
    trainable_count: float


def _frozen(op: Op, prefixes: tuple[str, ...]) -> bool:
    return any(op.name.startswith(p) for p in prefixes)


def param_memory(items, reg: Regime, optimizer: OptimizerKind, *, tp: int, sp: bool, ep: int,
                 dp: int, zero_stage: int, frozen_prefixes: tuple[str, ...] = (),
                 accumulating: bool = False) -> ParamMemory:
    """Parameter-side bytes on one rank holding ``items``: (op, count) pairs, or bare ops."""
    total = trainable = state = 0.0
    for item in items:
        op, n = item if isinstance(item, tuple) else (item, 1)
        if op.param_count == 0:
            continue
        share = op.param_count * shard_factors(op, tp, sp, ep).weights * n
        total += share
        if _frozen(op, frozen_prefixes):
            continue
        trainable += share
        shape = (op.gemm.k, op.gemm.n) if op.gemm is not None and op.gemm.batch == 1 else None
        state += state_elements(optimizer, op.param_count, shape) * (share / op.param_count)
    params_b = total * reg.weight_bytes
    grads_b = trainable * reg.grad_bytes
    if accumulating and reg.master_bytes:
        grads_b += trainable * 4.0
    optim_b = trainable * reg.master_bytes + state * reg.state_bytes
    if zero_stage >= 1:
        optim_b /= dp
    if zero_stage >= 2:
        grads_b /= dp
    if zero_stage >= 3:
        params_b /= dp
    return ParamMemory(params_b, grads_b, optim_b, total, trainable)


def attention_core_saved(op: Op, reg: Regime) -> float:
    """Per-sample bytes of the attention core that selective recomputation drops
    (Korthikanti et al. 2022 §5: the 5·a·s²·b term — softmax output, its dropout mask and output).
    Ops tagged ``attn_core`` drop everything they save; a single fused-or-materialised attention op
    drops only its score-sized part."""
    if op.attr("attn_core"):
        return op.saved.bytes(reg.act_bytes)
    scores_act, scores_mask = op.attr("saved_scores_act"), op.attr("saved_scores_mask")
    if scores_act is not None:
        return float(scores_act) * reg.act_bytes + float(scores_mask or 0.0)
    att = op.attention
    if att is None or att.fused:
        return 0.0
    scores = att.heads * att.seq_q * att.seq_kv
    full = op.saved.bytes(reg.act_bytes)
    return min(full, scores * (2 * reg.act_bytes + 1))  # softmax out, dropout out, 1-byte mask


def activation_bytes_per_microbatch(ops: tuple[Op, ...], micro_batch: float, reg: Regime, recompute: str,
                                    tp: int, sp: bool, ep: int, counts: tuple[int, ...] | None = None) -> float:
    """Bytes saved for backward by ``ops`` (each ``counts[i]`` times) for one micro-batch under the
    'none' or 'selective' policy (full recomputation keeps block inputs: :func:`checkpoint_bytes`)."""
    total = 0.0
    for i, op in enumerate(ops):
        b = saved_bytes(op, micro_batch, reg, tp, sp, ep)
        if recompute == "selective" and b:
            b -= attention_core_saved(op, reg) * micro_batch * shard_factors(op, tp, sp, ep).saved
        total += b * (counts[i] if counts else 1)
    return total


def block_input_elements(first_op: Op) -> float:
    """Elements of a block's input per sample (what full recomputation keeps): the first op's input."""
    if not first_op.shapes:
        return first_op.act_read.fw
    n = 1
    for d in first_op.shapes[0]:
        n *= d
    return float(n)


def checkpoint_bytes(block_first_ops: list[Op], micro_batch: float, reg: Regime, tp: int, sp: bool,
                     k: int = 1) -> float:
    """Full recomputation: every k-th block keeps its input (sharded with SP; Korthikanti et al. 2022
    Table 2: 2·sbh per layer, 2·sbh/t with SP)."""
    kept = 0.0
    for i, first in enumerate(block_first_ops):
        if i % k == 0:
            kept += block_input_elements(first) * micro_batch * reg.act_bytes / (tp if sp else 1)
    return kept


def largest_gradient_bytes(ops, micro_batch: float, reg: Regime, tp: int, sp: bool, ep: int) -> float:
    """Transient peak inside backward: the largest op's output-gradient + input-gradient working set."""
    largest = 0.0
    for op in ops:
        f = shard_factors(op, tp, sp, ep)
        grads = (op.act_write.fw * f.act_write + op.act_read.fw * f.act_read) * micro_batch * reg.act_bytes
        largest = max(largest, grads)
    return largest


def recompute_window_bytes(per_block_bytes: list[float], k: int = 1) -> float:
    """Full recomputation re-materialises k blocks at a time: the largest such window."""
    if not per_block_bytes:
        return 0.0
    return max(sum(per_block_bytes[i:i + k]) for i in range(0, len(per_block_bytes), k))
