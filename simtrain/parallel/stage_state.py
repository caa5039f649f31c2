"""A pipeline stage's parameter state and its optimizer step: weights, gradients and optimizer
state per rank (ZeRO / FSDP sharding, tied copies, frozen layers) and the memory-bound update over
them (cost/optimizer.py's passes and kernels under the stack's implementation)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from simtrain.cost.compute import issue_bound, memory_seconds
from simtrain.cost.fp8_cast import fp8_weight_cast_seconds, runs_in_fp8
from simtrain.cost.memory import ParamMemory, param_memory
from simtrain.cost.op_cost import shard_factors
from simtrain.cost.optimizer import (
    impl_kernels,
    impl_of_config,
    impl_passes,
    step_overhead_seconds,
    tensor_overhead_seconds,
)
from simtrain.cost.precision import Regime
from simtrain.graph.model import Model
from simtrain.graph.op import Op
from simtrain.parallel.layout import Layout
from simtrain.parallel.model_index import model_index
from simtrain.specs.efficiency import Efficiency
from simtrain.specs.train import TrainConfig

__all__ = ["Coster", "stage_param_memory", "stage_optimizer_seconds", "stage_fp8_weight_cast_seconds"]


class Coster(Protocol):
    """What the optimizer step reads of the program's op coster (parallel/program.py ``_OpCoster``)."""

    eff: Efficiency
    device: object
    optimizer_cold_scale: float


def _tied_copies(model: Model, blocks, items) -> list[Op]:
    """A tied weight (LM head = word embedding) whose owner sits on another pipeline stage is kept
    as a second copy on this stage, its gradients summed between the two (Megatron-LM does this
    for the word embeddings of the first and last stage)."""
    idx = model_index(model)
    out = []
    for op, _, _, _ in items:
        owner = op.attr("tied_to")
        if owner and idx.block_of(owner) not in blocks:
            # the tied weight's size: what a linear reads forward, what a lookup's gradient writes whole
            size = op.weight_read.fw if op.kind != "embedding" else op.weight_write.wgrad
            out.append(dataclasses.replace(op, param_count=int(size), attrs=()))
    return out


def stage_param_memory(model: Model, blocks, items, cfg: TrainConfig, lay: Layout, reg: Regime) -> ParamMemory:
    """Weights, grads, optimizer state of the stage (memoised with the model: a pure function of these,
    the ZeRO degree dp · cp and the stack's ``grad_fp32_buffer`` included)."""
    idx = model_index(model)
    key = ("params", blocks, lay.tp, lay.ep, lay.dp, lay.cp, cfg.sequence_parallel, cfg.zero_stage,
           str(cfg.optimizer), reg.precision, tuple(cfg.frozen_prefixes), lay.micro_batches > 1,
           cfg.stack.grad_fp32_buffer, cfg.stack.grad_buffer_16bit, cfg.stack.fp8_params)
    pm = idx.memo.get(key)
    if pm is None:
        pm = idx.memo[key] = _param_memory_uncached(model, blocks, items, cfg, lay, reg)
    return pm


def _param_memory_uncached(model: Model, blocks, items, cfg: TrainConfig, lay: Layout, reg: Regime) -> ParamMemory:
    """Weights, grads, optimizer state of the stage; frozen layers need the real op names."""
    if cfg.frozen_prefixes:
        block_set = set(blocks)
        ops = [(op, 1) for op in model.ops if op.block in block_set]
    else:
        ops = [(op, n) for op, n, _, _ in items]
    ops += [(op, 1) for op in _tied_copies(model, blocks, items)]
    # ZeRO / FSDP shard over dp · cp (cost/memory.py zero_degree); Megatron's main_grad per the stack
    return param_memory(ops, reg, cfg.optimizer, tp=lay.tp, sp=cfg.sequence_parallel, ep=lay.ep, dp=lay.dp,
                        cp=lay.cp, zero_stage=cfg.zero_stage, frozen_prefixes=tuple(cfg.frozen_prefixes),
                        accumulating=lay.micro_batches > 1, grad_fp32_buffer=cfg.stack.grad_fp32_buffer,
                        grad_buffer_16bit=cfg.stack.grad_buffer_16bit, fp8_params=cfg.stack.fp8_params)


def _dp_grad_copy_bytes(trainable: float, cfg: TrainConfig, lay: Layout, grad_pass: float) -> float:
    """Bytes the data-parallel wrapper moves copying the (unsharded) gradients in and out of its
    flat buffers (``Stack.dp_grad_copy_passes``; DDP's reducer copies each gradient into its bucket
    and back), when the gradients are reduced over dp · cp > 1 ranks."""
    if lay.dp * lay.cp == 1:
        return 0.0
    return cfg.stack.dp_grad_copy_passes * grad_pass * 4.0 * trainable


def _update_seconds(stream_bytes: float, copy_bytes: float, coster: Coster) -> float:
    """Memory seconds of the update's pass over parameters, gradients and states (``stream_bytes``) and
    of the data-parallel wrapper's gradient copies (``copy_bytes``, into buckets last touched a step
    ago: at the step-cold rate where calibrated). A profile with the in-step optimizer measured
    (``Efficiency.step_optimizer_s`` > 0) streams the update at the benches' memory model and adds that
    fixed cost; one without streams both at the cold rate (or the memory model where uncalibrated)."""
    eff, device = coster.eff, coster.device

    def cold_s(nbytes: float) -> float:
        cold = eff.step_cold_bytes_per_s
        return nbytes / cold if cold > 0 else memory_seconds(nbytes, device, eff)
    if eff.step_optimizer_s <= 0:
        return cold_s(stream_bytes + copy_bytes)
    fixed_s = eff.step_optimizer_s * coster.optimizer_cold_scale
    return memory_seconds(stream_bytes, device, eff) + fixed_s + cold_s(copy_bytes)


def stage_optimizer_seconds(trainable: float, items, cfg: TrainConfig, lay: Layout, reg: Regime,
                       coster: Coster) -> float:
    """Memory-bound update of this rank's (ZeRO-sharded) trainable parameters."""
    if trainable == 0 or coster.device.memory_external is not None:
        return 0.0  # weight streaming: the update runs in the external store (MemoryX), off the device
    shard = trainable / (lay.dp * lay.cp if cfg.zero_stage >= 1 else 1)  # ZeRO shards over dp × cp
    impl = impl_of_config(cfg, coster.device.kind)  # for-loop / foreach / fused (cost/optimizer.py)
    passes = impl_passes(cfg.optimizer, impl, reg.master_bytes > 0)
    if reg.loss_scaling:
        passes += 2  # unscale the gradients and check them for inf / nan
    grad_pass = reg.grad_bytes / 4.0  # one pass over the gradients, in fp32-vector units
    if cfg.grad_clipping:
        passes += 3 * grad_pass  # global-norm clipping: read for the norm, read + write to scale
    if not cfg.zero_grad_to_none:
        passes += grad_pass  # zero the gradient buffer for the next step
    seconds = _update_seconds(passes * 4.0 * shard, _dp_grad_copy_bytes(trainable, cfg, lay, grad_pass), coster)
    tensors = sum(n for op, n, _, _ in items if op.param_count) * 2  # weight + bias per parameterised op
    kernels = impl_kernels(cfg.optimizer, impl, tensors, shard, coster.device.kind)
    host_s = tensor_overhead_seconds(cfg.optimizer, impl, tensors, coster.eff) + step_overhead_seconds(
        cfg.optimizer, impl, coster.eff)
    # the step's own host work (zero_grad, the engine's start) runs on an empty queue: serial
    return issue_bound(seconds, kernels * coster.eff.launch_overhead_s + host_s, coster.eff) + \
        coster.eff.step_host_overhead_s + stage_fp8_weight_cast_seconds(items, cfg, lay, reg, coster)


def stage_fp8_weight_cast_seconds(items, cfg: TrainConfig, lay: Layout, reg: Regime, coster: Coster) -> float:
    """The once-a-step fp8 casts of the stage's fp8 linear weights, for a stack that casts them once a
    step (``Stack.fp8_weights_cast_per_step``; the forwards then cast only their inputs, cost/op_cost.py).
    Charged with the per-step work on the weights (the ``optimizer`` line): it sits on no micro-batch's
    critical path but the first, and a pipeline's ranks each pay it once."""
    if not cfg.stack.fp8_weights_cast_per_step:
        return 0.0
    def rank_weights(op) -> float:  # the rank's share: ÷ tp, experts ÷ ep too
        return op.param_count * shard_factors(op, lay.tp, False, lay.ep).weights
    return sum(n * fp8_weight_cast_seconds(rank_weights(op), coster.device, coster.eff)
               for op, n, _, _ in items if runs_in_fp8(op, reg))
