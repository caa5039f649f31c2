"""Per-op cost of one micro-batch on one rank: FLOPs, bytes and seconds by phase.

The op record is per sample; here it is scaled by the micro-batch ``b`` and sharded by tensor
parallelism (Megatron-LM, Shoeybi et al. 2019 §3; sequence parallelism, Korthikanti et al. 2022 §4.2):

| tp_split  | FLOPs / weights | activations read          | activations written       | saved for backward |
|-----------|-----------------|---------------------------|---------------------------|--------------------|
| column    | ÷ t             | full (input replicated)   | ÷ t                       | full; ÷ t with SP  |
| column, no GEMM (GeLU / SwiGLU after a column-split linear): everything ÷ t                            |
| row       | ÷ t             | ÷ t                       | full (partial sums)       | ÷ t                |
| heads     | ÷ t             | ÷ t                       | ÷ t                       | ÷ t                |
| vocab     | ÷ t             | full                      | ÷ t                       | full; ÷ t with SP  |
| vocab, no GEMM (vocab-parallel cross-entropy over the V/t logits): everything ÷ t                     |
| sequence  | full; ÷ t w. SP | full; ÷ t with SP         | full; ÷ t with SP         | full; ÷ t with SP  |
| replicate | full            | full                      | full                      | full               |
| expert    | ÷ t; weights ÷ (t · ep): EP spreads the experts, the all-to-all brings each rank its tokens |

These factors give Korthikanti et al. Table 2 exactly: sbh(10 + 24/t + 5as/(ht)) with TP and
34·sbh/t with TP + SP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.cost.attention_work import (  # re-exported: the per-op cost's public helpers before the split
    causal_executed_fraction,
    cpu_flash_blocks,
    executed_flops_fraction,
    flash_tiles,
    priced_flash_tiles,
)
from simtrain.cost.compute import (
    MATRIX_CLASSES,
    attention_kernel_seconds,
    compute_seconds,
    conv_layout_seconds,
    first_touch_seconds,
    issue_bound,
    launch_seconds,
    memory_seconds,
    strided_agrad_factor,
)
from simtrain.cost.fp8_cast import (  # re-exported: the per-op cost's public fp8 helpers before the split
    FP8_CAST_PASSES,
    fp8_cast_seconds,
    runs_in_fp8,
)
from simtrain.cost.precision import Regime
from simtrain.glossary import DType, OpClass
from simtrain.graph.op import Gemm, Op
from simtrain.specs.hardware import Device, Efficiency

__all__ = ["OpCost", "cold_stall_seconds", "ShardFactors", "shard_factors", "op_cost", "conv_stride", "saved_bytes", "executed_flops_fraction",
           "cpu_flash_blocks", "causal_executed_fraction", "priced_flash_tiles",
           "runs_in_fp8", "FP8_CAST_PASSES",
           "random_draws_seconds"]


@dataclass(frozen=True, slots=True)
class ShardFactors:
    """Multipliers (≤ 1) an op's per-sample counts take on one rank."""

    flops: float = 1.0
    weights: float = 1.0
    act_read: float = 1.0
    act_write: float = 1.0
    saved: float = 1.0


_FULL = ShardFactors()


def shard_factors(op: Op, tp: int, sp: bool, ep: int = 1) -> ShardFactors:
    """Per-rank share of an op under tensor (and sequence / expert) parallelism; see module table."""
    if op.tp_split == "expert":
        # EP spreads the experts (their weights) over ep ranks; the all-to-all brings each rank the
        # tokens routed to its experts, so with balanced routing its work is unchanged by ep
        inv = 1.0 / tp
        return ShardFactors(inv, inv / ep, inv, inv, inv)
    if tp == 1:
        return _FULL
    inv, seq = 1.0 / tp, (1.0 / tp if sp else 1.0)
    split = op.tp_split
    if split == "column" and op.gemm is None:
        # an elementwise op inside the column-split region (GeLU after fc1): its tensors are split
        return ShardFactors(inv, inv, inv, inv, inv)
    if split == "column":
        return ShardFactors(inv, inv, 1.0, inv, seq)
    if split == "row":
        return ShardFactors(inv, inv, inv, 1.0, inv)
    if split == "heads":
        return ShardFactors(inv, inv, inv, inv, inv)
    if split == "vocab" and op.gemm is None:
        # vocab-parallel cross-entropy (Megatron): each rank holds and saves its V/t logits, SP or not
        return ShardFactors(inv, inv, inv, inv, inv)
    if split == "vocab":
        return ShardFactors(inv, inv, 1.0, inv, seq)
    if split == "sequence":
        return ShardFactors(seq, seq, seq, seq, seq)
    return _FULL


_MATERIALISED_KERNELS = 4
"""Materialised attention runs as separate kernels — QKᵀ (bmm), scale + mask + softmax, dropout,
attention × V (bmm) — so their times add: the bmms are compute-bound, the score passes memory-bound,
and nothing overlaps them. Fused ("flash") attention is one kernel: the roofline max applies."""


@dataclass(frozen=True, slots=True)
class OpCost:
    """One op, one micro-batch, one rank: seconds and FLOPs per phase (fw, agrad, wgrad)."""

    fw_s: float
    agrad_s: float
    wgrad_s: float
    fw_flops: float
    bw_flops: float
    memory_bound_s: float = 0.0
    """Seconds (all phases) in which the memory leg of the roofline was the longer one."""
    fw_kernels: float = 0.0
    """Kernels launched in forward (fused chains count a fraction of one per op)."""
    bw_kernels: float = 0.0

    @property
    def bw_s(self) -> float:
        return self.agrad_s + self.wgrad_s


FUSED_ATTENTION_BW_RATIO = 2.5
"""A fused (flash) attention backward runs five matmuls of the forward's size — dV, dP, dQ, dK and
the recomputed QKᵀ — against the forward's two: 2.5 × the forward FLOPs (components.md §2 header,
[FA-1525]); the model-FLOP convention counts 2 × (the recompute is not model work)."""

_FUSABLE = frozenset({OpClass.ELEMENTWISE, OpClass.NORM})
"""Op classes a stack's fusion merges into chains (elementwise and normalisation passes)."""


def _kernel_for(op: Op, eff: Efficiency, stack):
    """The measured fused-attention kernel curve this op runs with under ``stack``, or None."""
    if stack is None or op.attention is None or not op.attention.fused:
        return None
    return eff.attention_kernels.get(stack.attention_kernel)


def _attention_kernel_s(op: Op, phase: str, micro_batch: float, f: ShardFactors, kernel, device, dtype, eff) -> float:
    """Compute seconds of a fused attention phase from the device's kernel-family curve."""
    if phase == "wgrad":
        return 0.0
    att = op.attention
    run = executed_flops_fraction(op, device)
    fw_exec = op.flops.fw * micro_batch * f.flops * run
    flops = fw_exec if phase == "fw" else FUSED_ATTENTION_BW_RATIO * fw_exec
    return attention_kernel_seconds(flops, phase, att.seq_q, att.causal, kernel, device, dtype, eff)


def _sharded_gemm(op: Op, tp: int) -> Gemm | None:
    g = op.gemm
    if g is None or tp == 1:
        return g
    if op.tp_split == "column" or op.tp_split == "vocab":
        return Gemm(g.m, max(g.n // tp, 1), g.k, g.batch)
    if op.tp_split == "row":
        return Gemm(g.m, g.n, max(g.k // tp, 1), g.batch)
    if op.tp_split == "heads":
        return Gemm(g.m, g.n, g.k, max(g.batch // tp, 1))
    return g


def _largest_activation(op: Op) -> float | None:
    """Elements per sample of the largest activation tensor ``op`` reads or writes: its output or its
    first (activation) input; None when the op records no shapes."""
    sizes = [math.prod(shape) for shape in (op.out_shape, op.shapes[0] if op.shapes else None) if shape]
    return float(max(sizes)) if sizes else None


def _fresh_tensor_s(op: Op, phase: str, f: ShardFactors, micro_batch: float, ab: float, wb: float,
                    eff: Efficiency) -> float:
    """First-touch seconds of the tensors a phase allocates: its activation writes (forward output,
    activation gradient) and its weight gradient (compute.first_touch_seconds). The allocator maps a
    tensor fresh only when that tensor alone reaches the threshold, so a phase's activation writes
    fault when the op's largest activation tensor does (cross-entropy's backward writes two logits-sized
    gradients, each under the threshold: neither faults, though together they pass it)."""
    if eff.first_touch_bytes_per_s <= 0:
        return 0.0
    act = getattr(op.act_write, phase) * f.act_write * micro_batch * ab
    largest = _largest_activation(op)
    one = act if largest is None else min(act, largest * f.act_write * micro_batch * ab)
    act_s = first_touch_seconds(act, eff) if one >= eff.first_touch_min_bytes else 0.0
    return act_s + first_touch_seconds(getattr(op.weight_write, phase) * f.weights * wb, eff)


def random_draws_seconds(op: Op, micro_batch: float, f: ShardFactors, eff: Efficiency) -> float:
    """Seconds to draw the forward's random numbers (dropout masks: the op's ``random_draws`` per
    sample, sharded like its output) at ``eff.rng_draws_per_s``; 0 where that rate is not set."""
    draws = op.attr("random_draws")
    if not draws or eff.rng_draws_per_s <= 0:
        return 0.0
    return float(draws) * micro_batch * f.act_write / eff.rng_draws_per_s


def _dense_conv(op: Op) -> bool:
    """A convolution with one group: the ops ``Efficiency.conv_layout_bytes_per_s`` prices. Grouped and
    depthwise kernels have their own curve (``curve_kind``), measured over NCHW, which holds their
    layout handling too (calibrate/bench_memory.py)."""
    return op.op_class is OpClass.CONV and (op.gemm is None or op.gemm.batch <= 1)


def conv_stride(op: Op) -> tuple[int, ...] | None:
    """A convolution's stride: the rule's ``stride`` attribute, else (captured graphs) the input over
    the output spatial size per dim, rounded (exact for padded convs; a small unpadded conv, 4 → 2
    with a 3-wide kernel, reads as stride 2). None for other ops."""
    if op.op_class is not OpClass.CONV or op.attention is not None:
        return None
    stride = op.attr("stride")
    if stride is not None:
        return (stride,) if isinstance(stride, int) else tuple(stride)
    if not op.shapes or len(op.shapes[0]) != len(op.out_shape) or len(op.out_shape) < 2:
        return None
    return tuple(max(round(i / o), 1) for i, o in zip(op.shapes[0][1:], op.out_shape[1:], strict=True) if o > 0)


def _compute_dtype(op: Op, reg: Regime, fp8: bool) -> DType:
    """The dtype ``op``'s kernels compute in: fp8 only on linear GEMMs (``runs_in_fp8``), the matrix
    dtype on other matrix ops, the vector dtype elsewhere."""
    if reg.matmul_dtype is DType.FP8 and not fp8:
        return reg.vector_dtype
    return reg.matmul_dtype if op.op_class in MATRIX_CLASSES else reg.vector_dtype


def _phase_bytes(op: Op, phase: str, f: ShardFactors, micro_batch: float, ab: float) -> float:
    """Activation and fixed-size bytes one phase moves for the micro-batch (before a stack's fusion)."""
    act = getattr(op.act_read, phase) * f.act_read + getattr(op.act_write, phase) * f.act_write
    fixed = getattr(op.fixed_read_bytes, phase) + getattr(op.fixed_write_bytes, phase)
    return (act * ab + fixed * f.act_write) * micro_batch


def _weight_bytes(op: Op, phase: str, f: ShardFactors, wb: float) -> float:
    return (getattr(op.weight_read, phase) + getattr(op.weight_write, phase)) * f.weights * wb


def _step_memory_seconds(op: Op, phase: str, act_bytes: float, bytes_moved: float, f: ShardFactors,
                         micro_batch: float, ab: float, device: Device, eff: Efficiency,
                         backward_working_set_bytes: float) -> float:
    """The memory leg of one phase inside a step. With ``eff.step_cold_bytes_per_s`` calibrated: the
    tensor the op just before it wrote (one of the op's output size: the forward input an
    element-wise chain passes on, the backward's incoming gradient dY) at the warm benchmark rate,
    every other byte at the cold rate (calibrate/bench_memory.py). Without it, the warm model, where a
    backward's reads compete with the whole saved set for a cache tier."""
    if eff.step_cold_bytes_per_s <= 0:
        return memory_seconds(bytes_moved, device, eff, backward_working_set_bytes if phase != "fw" else 0.0)
    recent = min(act_bytes, op.act_write.fw * f.act_write * micro_batch * ab)
    warm = memory_seconds(bytes_moved, device, eff) * recent / bytes_moved if bytes_moved > 0 else 0.0
    return warm + (bytes_moved - recent) / eff.step_cold_bytes_per_s


def cold_stall_seconds(step_memory_s: float, bytes_moved: float, device: Device, eff: Efficiency) -> float:
    """What the bytes nobody touched since the step before add to a phase over the same bytes at the
    benchmarks' (cache-warm) memory model: the memory leg inside a step less that model's, ≥ 0; 0 where
    ``eff.step_cold_bytes_per_s`` is not calibrated. The cost layer adds it to the phase's roofline
    rather than overlapping it with the compute: a compute-bound kernel's first pass over its weights and
    inputs stalls on the misses. Measured on this project's EPYC VM (calibrate/bench_memory.py's
    evicting gap, 15 alternated cold / hot calls): a 128 × 1024 × 1024 GEMM (5 MiB) 70–130 µs slower
    cold than hot on 1.3 ms, a 1×1 convolution moving 7.7 MiB 85–300 µs on 0.65 ms, a 3×3 one moving
    2.1 MiB 18–68 µs on 1.0 ms: the order of the bytes at the cold rate (116, 180, 49 µs at 45 GB/s)."""
    if eff.step_cold_bytes_per_s <= 0 or bytes_moved <= 0:
        return 0.0
    return max(step_memory_s - memory_seconds(bytes_moved, device, eff), 0.0)


def op_cost(op: Op, micro_batch: int, reg: Regime, device: Device, eff: Efficiency,
            tp: int = 1, sp: bool = False, ep: int = 1, moe_imbalance: float = 1.0, stack=None,
            backward_working_set_bytes: float = 0.0, call_overhead_s: float | None = None) -> OpCost:
    """Roofline seconds of ``op`` for one micro-batch of ``micro_batch`` samples on one rank.

    ``moe_imbalance`` (≥ 1): the busiest expert rank receives that many times its fair share of
    tokens, and every rank waits for it (expert ops only). ``stack`` (a ``Stack``): the fused
    attention kernel family, and how much of the eager elementwise / norm traffic and launches
    its fusion leaves. ``backward_working_set_bytes``: the activations the step saves for its backward
    (per micro-batch, this rank): what a backward op's reads compete with in a cache tier
    (``memory_seconds``; only devices with ``Efficiency.cache_bytes`` > 0 notice). ``call_overhead_s``:
    the in-step cost of each launch of this op when its gap is known (``parallel.cold_calls``); None:
    ``eff.step_call_overhead_s``."""
    f = shard_factors(op, tp, sp, ep)
    call_s = eff.step_call_overhead_s if call_overhead_s is None else call_overhead_s
    kernel = _kernel_for(op, eff, stack)
    fusable = stack is not None and op.op_class in _FUSABLE
    traffic = stack.elementwise_bytes_fraction if fusable else 1.0
    launches = stack.elementwise_kernels_fraction if fusable else 1.0
    if op.tp_split == "expert" and moe_imbalance != 1.0:
        micro_batch = micro_batch * moe_imbalance
    fp8 = runs_in_fp8(op, reg)
    dtype = _compute_dtype(op, reg, fp8)
    gemm = _sharded_gemm(op, tp)
    m_rows = (gemm.m * micro_batch) if gemm is not None else 1
    run = executed_flops_fraction(op, device)
    ab, wb = reg.act_bytes, reg.weight_bytes
    out, mem_bound = [], 0.0
    sequential = op.attention is not None and not op.attention.fused
    for phase in ("fw", "agrad", "wgrad"):
        flops = getattr(op.flops, phase) * micro_batch * f.flops
        act_bytes = _phase_bytes(op, phase, f, micro_batch, ab)
        bytes_moved = act_bytes * traffic + _weight_bytes(op, phase, f, wb)
        if flops == 0 and bytes_moved == 0:
            out.append((0.0, 0.0, 0.0))
            continue
        if kernel is not None:
            t_c = _attention_kernel_s(op, phase, micro_batch, f, kernel, device, dtype, eff)
        else:
            work = strided_agrad_factor(conv_stride(op), eff) if phase == "agrad" else 1.0
            t_c = compute_seconds(flops * run * work, op.op_class, device, dtype, eff, gemm, m_rows, phase,
                                  op.kind, tiles=flash_tiles(op, micro_batch, f.flops, device, eff))
        t_m = _step_memory_seconds(op, phase, act_bytes * traffic, bytes_moved, f, micro_batch, ab, device, eff,
                                   backward_working_set_bytes)
        stall = cold_stall_seconds(t_m, bytes_moved, device, eff)
        kernels = _issued_kernels(op, phase, eff, launches, sequential)
        launch_s = (launch_seconds(op.op_class, eff, phase) + call_s) * kernels
        # legs kept apart for the bottleneck; the cold bytes' extra time is not hidden behind compute
        sec = t_c + t_m if sequential else max(t_c, t_m - stall) + stall
        sec += _phase_extras_s(op, phase, f, micro_batch, ab, wb, act_bytes, eff)
        if fp8 and flops:
            cast_s, cast_k = fp8_cast_seconds(phase, gemm, micro_batch, stack, device, eff)
            sec, kernels = sec + cast_s, kernels + cast_k
        sec = issue_bound(sec, launch_s, eff)
        if t_m > t_c:
            mem_bound += sec
        out.append((sec, flops, kernels))
    (fw_s, fw_f, fw_k), (ag_s, ag_f, ag_k), (wg_s, wg_f, wg_k) = out
    return OpCost(fw_s, ag_s, wg_s, fw_f, ag_f + wg_f, mem_bound, fw_k, ag_k + wg_k)


def _phase_extras_s(op: Op, phase: str, f: ShardFactors, micro_batch: float, ab: float, wb: float,
                    act_bytes: float, eff: Efficiency) -> float:
    """The phase's work besides its kernel: fresh tensors' first touch, a dense conv's NCHW layout
    reorders and (forward) the random draws of its dropout masks."""
    extra = _fresh_tensor_s(op, phase, f, micro_batch, ab, wb, eff)
    if _dense_conv(op):  # NCHW activations reordered to the kernel's layout and back
        extra += conv_layout_seconds(act_bytes, eff)
    return extra + (random_draws_seconds(op, micro_batch, f, eff) if phase == "fw" else 0.0)


def _issued_kernels(op: Op, phase: str, eff: Efficiency, launches: float, sequential: bool) -> float:
    """Kernels the host issues for one phase of ``op``: where the host runs ahead of the device
    (``Efficiency.launch_async``) and the capture counted them (``aten_kernels``: an MHA call's clones,
    scalings and batched GEMMs, a linear's backward GEMMs and bias sum), that count; else one per
    phase (``_MATERIALISED_KERNELS`` for unfused attention), the count the CPU's in-step costs were
    calibrated with. ``launches`` scales fusable kernels (a compiling stack's fused fraction)."""
    counted = op.attr("aten_kernels") if eff.launch_async else None
    if counted is not None:
        return getattr(counted, phase) * launches
    return _MATERIALISED_KERNELS if sequential else launches


def saved_bytes(op: Op, micro_batch: int, reg: Regime, tp: int = 1, sp: bool = False, ep: int = 1) -> float:
    """Bytes ``op`` keeps for backward for one micro-batch on one rank."""
    return op.saved.bytes(reg.act_bytes) * micro_batch * shard_factors(op, tp, sp, ep).saved

