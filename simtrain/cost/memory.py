"""Memory per device: weights, gradients, optimizer state, activations, buffers, overhead.

* weights: the compute copy (4 B fp32, 2 B in 16-bit regimes); ZeRO-3 / FSDP shards it over N_d.
* gradients: 16-bit (or fp32) gradients of trainable parameters; ZeRO-2+ shards them over N_d. In a
  16-bit regime an fp32 gradient buffer (4 B/param) is kept with gradient accumulation, and always
  when the stack says so (``Stack.grad_fp32_buffer``: Megatron-LM's ``main_grad``, accumulated in
  fp32 — ``--accumulate-allreduce-grads-in-fp32``; FSDP's fp32 sharded ``.grad``); it is sharded like
  the gradients.
* optimizer: fp32 master copy (16-bit regimes) + fp32 states (optimizer.py); ZeRO-1+ shards over N_d
  (Rajbhandari et al. 2020, §5.1–5.3 and Fig. 1: (2 + 2 + K)·Ψ → 2Ψ + 2Ψ + KΨ/N_d → 2Ψ + (2 + K)Ψ/N_d
  → (2 + 2 + K)Ψ/N_d).
  N_d, the ZeRO degree, is dp · cp: context-parallel ranks hold the same weights and reduce their
  gradients together, so Megatron-core's distributed optimizer and FSDP shard over the
  data-parallel-with-context-parallel group (Megatron-core ``parallel_state``
  ``get_data_parallel_group(with_context_parallel=True)``). Expert weights, already spread over ep,
  shard over the expert-data-parallel group dp · cp / ep (EP carves its ranks out of dp · cp).
* activations: bytes saved for backward × micro-batches in flight, under the recompute policy
  (none | selective: attention core recomputed | full: block inputs only | every-k blocks).
* buffers: the transient peak inside backward (the largest op's output-gradient + input-gradient
  working set, plus one re-materialised block under full recomputation), the fp32 gradient of the
  logits on the stage holding the loss (:func:`fp32_logits_grad_bytes`), the input micro-batch on
  device, and gathered parameters under ZeRO-3.
* overhead: allocator fragmentation + framework workspace. Either the stack's allocator model
  (MemoryReport.reserved_bytes = allocated · (1 + allocator_reserve_fraction) + workspace_bytes) or,
  when the stack gives none (the reference stack), an explicit fraction of usable capacity
  (TrainConfig.memory_overhead_fraction, 5 % by default: a documented allowance, not a measurement).
Frozen layers (TrainConfig.frozen_prefixes) have weights but no gradients or optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.cost.op_cost import runs_in_fp8, saved_bytes, shard_factors
from simtrain.cost.optimizer import state_elements
from simtrain.cost.precision import Regime
from simtrain.glossary import DTYPE_BYTES, DType, OptimizerKind, Precision
from simtrain.graph.op import Op

__all__ = ["ParamMemory", "param_memory", "zero_degree", "activation_bytes_per_microbatch", "attention_core_saved",
           "block_input_elements", "checkpoint_bytes", "largest_gradient_bytes", "recompute_window_bytes",
           "fp32_logits_grad_bytes", "metric_peak_bytes", "op_sac_bytes", "FP32_BYTES", "LOSS_FP32_GRADIENTS"]

FP32_BYTES = 4

LOSS_FP32_GRADIENTS = {"upcast": 1, "eager": 2, "in-place": 0, "fused": 0}
"""fp32 logits-sized gradients the loss's backward holds at once beside what the loss keeps, by
``Stack.loss_kernel``: eager PyTorch's ``nll_loss`` gradient and ``log_softmax`` input gradient (2);
Megatron's in-place softmax gradient and a fused kernel's activation-dtype gradient (0); simtrain's
generic upcast loss (1)."""


@dataclass(frozen=True, slots=True)
class ParamMemory:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    params_count: float
    trainable_count: float


def _frozen(op: Op, prefixes: tuple[str, ...]) -> bool:
    return any(op.name.startswith(p) for p in prefixes)


def zero_degree(dp: int, cp: int = 1, ep: int = 1, expert: bool = False) -> float:
    """N_d, the ranks ZeRO / FSDP shards over: dp · cp (Megatron-core distributed optimizer and FSDP
    shard over the data-parallel group *with* context parallelism), or dp · cp / ep for expert
    weights (their expert-data-parallel group); at least 1."""
    n = dp * cp
    return max(1.0, n / ep) if expert else float(n)


def _param_shares(items, optimizer: OptimizerKind, tp: int, sp: bool, ep: int,
                  frozen_prefixes: tuple[str, ...], fp8_of=None) -> dict[bool, list[float]]:
    """{is_expert: [weights, trainable weights, optimizer-state elements, weights stored in fp8]} held
    by one rank (``fp8_of(op)``: whether its weights are kept in fp8)."""
    shares = {False: [0.0, 0.0, 0.0, 0.0], True: [0.0, 0.0, 0.0, 0.0]}
    for item in items:
        op, n = item if isinstance(item, tuple) else (item, 1)
        if op.param_count == 0:
            continue
        acc = shares[op.tp_split == "expert"]
        share = op.param_count * shard_factors(op, tp, sp, ep).weights * n
        acc[0] += share
        if fp8_of is not None and fp8_of(op):
            acc[3] += share
        if _frozen(op, frozen_prefixes):
            continue
        acc[1] += share
        shape = (op.gemm.k, op.gemm.n) if op.gemm is not None and op.gemm.batch == 1 else None
        acc[2] += state_elements(optimizer, op.param_count, shape) * (share / op.param_count)
    return shares


def param_memory(items, reg: Regime, optimizer: OptimizerKind, *, tp: int, sp: bool, ep: int,
                 dp: int, zero_stage: int, frozen_prefixes: tuple[str, ...] = (),
                 accumulating: bool = False, cp: int = 1, grad_fp32_buffer: bool = False,
                 grad_buffer_16bit: bool | str = False, fp8_params: bool = False) -> ParamMemory:
    """Parameter-side bytes on one rank holding ``items``: (op, count) pairs, or bare ops.

    Per trainable parameter (Rajbhandari et al. 2020 §5, Ψ parameters, N_d = :func:`zero_degree`):
    weights ``weight_bytes`` (÷ N_d at stage 3); gradients ``grad_bytes``, + 4 B for an fp32
    accumulation buffer in 16-bit regimes when ``accumulating``, or only the 4-byte fp32 buffer when
    the stack keeps one (``grad_fp32_buffer``: Megatron's ``main_grad``, into which each 16-bit
    gradient is accumulated as soon as it is computed — Megatron-core docs, "Distributed Optimizer":
    bf16 params + fp32 grads = 18 B/param, 6 + 12/d with the distributed optimizer) (÷ N_d at stage
    ≥ 2); optimizer ``master_bytes`` + K·``state_bytes`` (÷ N_d at stage ≥ 1). ``grad_buffer_16bit``:
    that buffer in the 16-bit gradient dtype (True: Megatron's ``--grad-reduce-in-bf16``; ``"fp16"``:
    under fp16 only, Megatron's default). ``fp8_params``:
    the weights of the ops whose GEMMs run in fp8 take 1 byte (``Stack.fp8_params``)."""
    total = trainable = params_b = grads_b = optim_b = 0.0
    sixteen = grad_buffer_16bit is True or (grad_buffer_16bit == "fp16" and reg.precision is Precision.FP16)
    fp8_of = (lambda op: runs_in_fp8(op, reg)) if fp8_params else None
    for expert, (weights, train, state, in_fp8) in _param_shares(items, optimizer, tp, sp, ep, frozen_prefixes,
                                                                 fp8_of).items():
        n_d = zero_degree(dp, cp, ep, expert)
        p = (weights - in_fp8) * reg.weight_bytes + in_fp8 * DTYPE_BYTES[DType.FP8]
        g, o = train * reg.grad_bytes, train * reg.master_bytes + state * reg.state_bytes
        if grad_fp32_buffer and reg.master_bytes:
            # main_grad: the 16-bit gradient lands in it and is not kept
            g = train * (reg.grad_bytes if sixteen else FP32_BYTES)
        elif accumulating and reg.master_bytes:
            g += train * FP32_BYTES
        params_b += p / (n_d if zero_stage >= 3 else 1)
        grads_b += g / (n_d if zero_stage >= 2 else 1)
        optim_b += o / (n_d if zero_stage >= 1 else 1)
        total, trainable = total + weights, trainable + train
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
                                    tp: int, sp: bool, ep: int, counts: tuple[int, ...] | None = None,
                                    modules: tuple[str, ...] | None = None) -> float:
    """Bytes saved for backward by ``ops`` (in layer order, each ``counts[i]`` times) for one
    micro-batch under the 'none' or 'selective' policy (full recomputation keeps block inputs:
    :func:`checkpoint_bytes`). Selective (``modules``, parallel/recompute.py): a recomputed
    materialised attention core drops its score-sized tensors; inside a recomputed run of other ops
    only the first op's saved tensors (the run's input) stay; a matmul right after such a run drops
    its saved input, which the run recomputes."""
    from simtrain.parallel.recompute import selected
    total, run, run_attention = 0.0, False, False
    for i, op in enumerate(ops):
        b = saved_bytes(op, micro_batch, reg, tp, sp, ep)
        attention = op.attention is not None or bool(op.attr("attn_core"))
        chosen = recompute == "selective" and selected(op, modules)
        if chosen and attention and b:
            b -= attention_core_saved(op, reg) * micro_batch * shard_factors(op, tp, sp, ep).saved
        elif chosen and run and not run_attention:
            b = 0.0
        elif not chosen and run and not run_attention and op.gemm is not None:
            b = 0.0
        run, run_attention = chosen, chosen and attention
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
    """Transient peak inside backward: the largest op's output-gradient + input-gradient working set
    (ops without a backward hold none)."""
    largest = 0.0
    for op in ops:
        if not op.has_backward:
            continue
        f = shard_factors(op, tp, sp, ep)
        grads = (op.act_write.fw * f.act_write + op.act_read.fw * f.act_read) * micro_batch * reg.act_bytes
        largest = max(largest, grads)
    return largest


def fp32_logits_grad_bytes(ops, micro_batch: float, reg: Regime, tp: int,
                           counts: tuple[int, ...] | None = None) -> float:
    """The fp32 gradient of the logits that the loss's backward materialises (transient), on one rank.

    Frameworks upcast the LM-head output to fp32 for the cross-entropy (Megatron-LM
    ``vocab_parallel_cross_entropy(logits.float(), labels)``; PyTorch autocast runs ``log_softmax`` /
    ``cross_entropy`` in fp32; Hugging Face ``logits.float()``). The fp32 logits themselves are
    already counted: the ``cross_entropy`` rule saves its fp32 log-probabilities (4 B per logit,
    ``log_softmax_bytes``; Megatron turns the fp32 logits into them in place), and the working set of
    :func:`largest_gradient_bytes` holds the logits' gradient in the activation dtype. Missing is
    the fp32 gradient of the logits, 4 B per logit, alive beside the saved fp32 log-probabilities
    until it is cast back to the activation dtype: b · s · V/t · 4 bytes — one such gradient; the
    memory plan multiplies it by :data:`LOSS_FP32_GRADIENTS` of the stack's loss kernel (vocab-parallel: each tensor
    rank holds V/t of the logits; ``micro_batch`` already ÷ cp, so s is the rank's sequence share).
    0 in fp32 regimes (no upcast: the working set already counts a 4-byte gradient) and for losses
    without the rule's attribute (imported graphs carry their own dtypes)."""
    if reg.act_bytes >= FP32_BYTES:
        return 0.0
    total = 0.0
    for i, op in enumerate(ops):
        logp = op.attr("log_softmax_bytes") if op.kind == "cross_entropy" else None
        if logp:
            total += float(logp) * micro_batch / (tp if op.tp_split == "vocab" else 1) * (counts[i] if counts else 1)
    return total


def op_sac_bytes(ops, roles, micro_batch: float, reg: Regime, tp: int, sp: bool, ep: int,
                 counts: tuple[int, ...] | None = None) -> float:
    """Per-op selective AC (recompute="selective-op"): bytes one checkpointed layer keeps per micro-batch
    — its input (the checkpoint's) and the share of each op's output the policy saves (``roles``:
    parallel/recompute.py ``op_sac_roles``, by local op name), with a fused attention kernel's
    log-sum-exp. A Llama layer: input h, wq h, wv h_kv, attention h, w1 f, w2 h elements per token."""
    from simtrain.parallel.recompute import local_name
    kept = checkpoint_bytes([ops[0]], micro_batch, reg, tp, sp)
    for i, op in enumerate(ops):
        role = roles.get(local_name(op))
        if role is None or not role.saved_output_fraction:
            continue
        f = shard_factors(op, tp, sp, ep)
        share = 1.0 / tp if sp and op.tp_split == "row" else f.act_write  # SP: the reduce-scattered output
        out = 1.0
        for d in op.out_shape:
            out *= d
        b = out * role.saved_output_fraction * reg.act_bytes * share
        if op.attention is not None:
            b += op.saved.fixed_bytes * f.saved
        kept += b * micro_batch * (counts[i] if counts else 1)
    return kept


def recompute_window_bytes(per_block_bytes: list[float], k: int = 1) -> float:
    """Full recomputation re-materialises k blocks at a time: the largest such window."""
    if not per_block_bytes:
        return 0.0
    return max(sum(per_block_bytes[i:i + k]) for i in range(0, len(per_block_bytes), k))


def metric_peak_bytes(ops, micro_batch: float, reg: Regime, tp: int, counts: tuple[int, ...] | None = None) -> float:
    """Bytes above the static memory while a trainer re-evaluates the loss for its metrics after a
    micro-batch's backward (graph/rules/lookup.py ``cross_entropy_metric``): the logits it kept for
    them, in the activation dtype, and one call's fp32 upcast and log-probabilities (the calls run one
    after another). The micro-batch's other activations are freed by then, so this is a second
    moment beside the backward's peak, not an addition to it. Per rank: V/t logits per row."""
    total = 0.0
    for i, op in enumerate(ops):
        if op.kind != "cross_entropy_metric":
            continue
        logits = float(op.act_read.fw) / float(op.attr("calls", 1))  # per sample, one call's
        share = micro_batch / (tp if op.tp_split == "vocab" else 1) * (counts[i] if counts else 1)
        total += (reg.act_bytes + 2 * FP32_BYTES) * logits * share
    return total
