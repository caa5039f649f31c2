"""Which collectives a stage issues, and how much compute can hide them.

Per micro-batch (Megatron-LM, Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2):
* tp: an all-reduce of the output of every row-split op in forward and of the input gradient of its
  paired column-split op in backward (2 + 2 per transformer layer); with sequence parallelism each
  becomes an all-gather + reduce-scatter of the same bytes. Vocab-split embedding: a forward
  all-reduce of its output; vocab-split LM head: a backward all-reduce of its input gradient.
  Full recomputation repeats the forward collectives. Nothing hides them (they sit on the critical path).
* cp: ring attention passes K and V blocks cp − 1 times in forward (dK, dV too in backward),
  overlapped with the attention compute of the block already held (Liu et al. 2023, Ring Attention).
* ep: per MoE layer, a dispatch all-to-all of the routed tokens before the experts and a combine
  all-to-all of their outputs after, in forward, and the two gradients in backward (2 + 2; GShard,
  Lepikhin et al. 2020 §2.2; Megatron-core MoE token dispatcher). Each carries the rank's
  T·h·k elements (T tokens, h hidden, top-k), (ep − 1)/ep of which leave the rank.
* pp: one send of the boundary activation forward and one of its gradient backward per chunk (the
  tail of the sender's task: blocking, as Megatron-LM's p2p exchange).
* ZeRO-3 / FSDP: all-gather of the parameters before each layer's forward and backward, prefetched
  one layer ahead, so the layer before hides it (per micro-batch: every forward and backward gathers);
  a root unit (embeddings, final norm, head: ``Stack.fsdp_root_unit``) once per forward, before
  anything can hide it, and kept through the backward.
* weight streaming (wafer-scale): weights in for forward and backward, gradients out.

Per step (data parallelism over dp × cp ranks):
* ZeRO-0: all-reduce of the gradients in buckets overlapped with the last backward task — exposed is
  what it cannot hide, never less than the last bucket;
* ZeRO-1/2: reduce-scatter of the gradients (overlapped the same way) + all-gather of the updated
  16-bit parameters, overlapped with the first forward (Megatron-Core --overlap-param-gather: exposed
  before it, phase ``step-start``) or after the optimizer step (exposed);
* ZeRO-3 / FSDP: the reduce-scatter, in what the parameter gathers leave of the link; with a root unit
  (``Stack.fsdp_root_unit``, parallel/fsdp_units.py) one reduce-scatter per block as its backward ends
  and the root's after the backward's last op, exposed (phase ``step-root``; ``accum-root`` for the
  earlier micro-batches of a stack that reduces every micro-batch).
* A rank holding several model chunks (interleaved 1F1B, DualPipeV) syncs each chunk on its own, as
  Megatron-core does: a chunk's gradients when its last backward ends, behind the rank's remaining
  tasks; chunk j + 1's parameters from chunk j's first forward (parallel/chunk_sync.py).
* A stack that reduces in every micro-batch's backward (``Stack.grad_sync_every_micro_batch_from_zero``:
  FSDP without ``no_sync``, DeepSpeed from ZeRO-2) also runs the m − 1 earlier reductions, each behind
  its own micro-batch's backward (phase ``accum``, charged with the step's sync).

Overlap is composed so that no hiding window is counted twice and a faster device, memory or link
never lengthens a step: a phase's duration is built up in layers — its compute, then what the ops'
own collectives leave exposed (ring attention behind its attention op, TP), then the FSDP gathers
hidden behind that duration, then weight streaming behind all of it (its own link) — each layer
max(window, comm)-like (window + max(0, comm − window)), so the duration only grows with every
time it is made of. Per-step syncs hide behind whole tasks of the rank they follow or precede
(the rank's last backward task, its first forward task), never behind compute counted elsewhere.
"""

from __future__ import annotations

from simtrain.cost.op_cost import shard_factors
from simtrain.cost.precision import Regime
from simtrain.glossary import DTYPE_BYTES, DType, PipelineSchedule
from simtrain.graph.op import Op
from simtrain.parallel.chunk_sync import (
    bucketed_exposed_s,
    gather_exposed_s,
    grad_sync_exposed_s,
    share_buckets,
)
from simtrain.parallel.comm_task import CommTask
from simtrain.parallel.fsdp_comm import fsdp_gathers, grad_sync_units
from simtrain.parallel.fsdp_units import FsdpUnits
from simtrain.parallel.recompute import early_stop_skips, recomputed_count
from simtrain.parallel.schedule_orders import ONE_CHUNK, ChunkWindows

__all__ = ["CommTask", "microbatch_comm", "step_comm"]



def tp_hidden_share(stack, phase: str, sequence_parallel: bool) -> float:
    """Share of a phase's tensor-parallel collective seconds hidden behind compute. Per row-parallel op
    the backward task holds two collectives' worth (with sequence parallelism the all-gather of its
    output gradient and the reduce-scatter of the next column-parallel op's input gradient; without it,
    that input gradient's all-reduce): under ``tp_dgrad_comm_async`` the input-gradient one runs beside
    the weight-gradient GEMM (Megatron-Core layers.py backward), so half of the task hides with sequence
    parallelism and all of it without."""
    share = stack.tp_comm_overlap
    if phase == "bw" and stack.tp_dgrad_comm_async:
        share = max(share, 0.5 if sequence_parallel else 1.0)
    return share


def fp8_gather_scale(reg: Regime) -> float:
    """Bytes of the forward's sequence-parallel all-gather per byte priced at the activation size. Under
    fp8 the norm before each column-parallel GEMM writes its output in fp8 and that tensor is what is
    gathered (Transformer Engine ``layernorm_linear.py``: ``ln_out_dtype = torch.uint8`` when fp8, then
    ``gather_along_first_dim(ln_out)``), so it moves 1 byte an element; the reduce-scatters of the
    row-parallel outputs stay at the activation dtype."""
    return DTYPE_BYTES[DType.FP8] / reg.act_bytes if reg.matmul_dtype is DType.FP8 else 1.0


def _tp_tasks(ops, cfg, lay, reg, comm, skip: frozenset[str] = frozenset()) -> list:
    if lay.tp == 1:
        return []
    b = lay.micro_batch / lay.cp
    fw = bw = 0.0
    fw_n = bw_n = 0
    for op, n, _, _ in ops:
        out_bytes = op.out_elements * b * reg.act_bytes
        if op.tp_split == "row":
            fw, fw_n, bw, bw_n = fw + n * out_bytes, fw_n + n, bw + n * out_bytes, bw_n + n
        elif op.tp_split == "vocab" and op.kind == "embedding":
            fw, fw_n = fw + n * out_bytes, fw_n + n
        elif op.tp_split == "vocab":
            in_bytes = op.act_read.fw * b * reg.act_bytes
            bw, bw_n = bw + n * in_bytes, bw_n + n
    out = []
    kind = "allgather+reducescatter" if cfg.sequence_parallel else "allreduce"
    stack = cfg.stack

    def task(phase: str, nbytes: float, count: int) -> CommTask:
        # TP comm overlap (Megatron-Core --tp-comm-overlap, async TP) hides a share behind the GEMMs
        sec = comm.tp_allreduce_s(nbytes, nbytes * fp8_gather_scale(reg) if phase != "bw" else None)
        share = tp_hidden_share(stack, phase, cfg.sequence_parallel)
        return CommTask("tp", kind, phase, nbytes, sec, count, overlap_s=share * sec * count,
                        slowdown=stack.comm_compute_slowdown)
    for phase, total, n in (("fw", fw, fw_n), ("bw", bw, bw_n)):
        if n:
            out.append(task(phase, total / n, n))
    if str(cfg.recompute) == "full" and fw_n:
        rec_n = sum(recomputed_count(n, cfg) for op, n, repeated, _ in ops
                    if op.tp_split == "row" and repeated and op.name not in skip)
        if rec_n:
            out.append(task("recompute", fw / fw_n, rec_n))
    return out


def _cp_tasks(ops, lay, reg, comm, coster) -> list:
    if lay.cp == 1:
        return []
    out = []
    for op, n, _, _ in ops:
        att = op.attention
        if att is None:
            continue
        kv_elems = att.kv_heads * (att.head_dim + att.v_dim) * (att.seq_kv / lay.cp) * lay.micro_batch  # K + V
        kv_bytes = kv_elems * reg.act_bytes * shard_factors(op, lay.tp, False).flops  # heads split by tp
        c = coster(op)
        step = comm.cp_send_s(kv_bytes)
        for _ in range(n):  # per attention layer: its own ring, hidden by its own attention compute
            out.append(CommTask("cp", "ring-sendrecv", "fw", kv_bytes, step, lay.cp - 1, overlap_s=c.fw_s))
            out.append(CommTask("cp", "ring-sendrecv", "bw", 2 * kv_bytes, comm.cp_send_s(2 * kv_bytes),
                                lay.cp - 1, overlap_s=c.bw_s))
    return out


def _ep_tasks(ops, cfg, lay, reg, comm) -> list:
    """All-to-all of one micro-batch per MoE layer (GShard, Lepikhin et al. 2020 §2.2; Megatron-core
    ``MoEAlltoAllTokenDispatcher``): the rank's T = b·s/(cp·tp) tokens, each sent to top_k experts, so
    a dispatch buffer of S = T·h·k·bytes (the h-wide output of ``moe_experts`` × k: not its
    ``act_read``, which also counts the expert FFN's internal tensors). S is the all-to-all's
    nccl-tests message size (collectives.py: everything a rank sends, its own share included), so
    the collective applies the (ep − 1)/ep that leaves the rank; it is not applied here. The combine
    sends S back. Forward: dispatch + combine; backward: their gradients (2 + 2); full recomputation
    repeats the forward pair.

    T ÷ tp as ``shard_factors`` does for experts (Megatron-core needs sequence parallelism with MoE
    and TP: each TP rank dispatches its own sequence shard). The capacity factor is not applied: the
    cost layer models dropless routing (moe.py), whose buffers hold exactly T·k tokens, unpadded.
    """
    if lay.ep == 1:
        return []
    out = []
    b = lay.micro_batch / lay.cp
    full = str(cfg.recompute) == "full"
    for op, n, repeated, _ in ops:
        if op.moe is None or op.tp_split != "expert":
            continue
        dispatch_bytes = op.out_elements * op.moe.top_k * b * reg.act_bytes / lay.tp  # T·h·k·bytes
        sec = comm.ep_alltoall_s(dispatch_bytes)
        out.append(CommTask("ep", "alltoall", "fw", dispatch_bytes, sec, 2 * n))  # dispatch + combine
        out.append(CommTask("ep", "alltoall", "bw", dispatch_bytes, sec, 2 * n))  # their gradients
        if full and repeated:  # full recomputation re-runs the layer's forward, its all-to-alls included
            out.append(CommTask("ep", "alltoall", "recompute", dispatch_bytes, sec, 2 * recomputed_count(n, cfg)))
    return out


def _pp_tasks(last, cfg, lay, reg, comm, stage: int) -> list:
    if lay.pp == 1:
        return []
    b = lay.micro_batch / lay.cp
    # Megatron's scatter-gather optimisation sends 1/tp of the activation per rank (Narayanan §4.1)
    boundary = last.out_elements * b * reg.act_bytes / lay.tp
    sec = comm.pp_send_s(boundary, stage)
    # each of the v chunks of a stage sends its activation on and its gradient back once per micro-batch;
    # under the interleaved schedule the stack may post them before the next chunk's compute
    stack = cfg.stack
    share = stack.pp_comm_overlap if cfg.pipeline_schedule == PipelineSchedule.INTERLEAVED else 0.0
    return [CommTask("pp", "send", phase, boundary, sec, lay.v, overlap_s=share * sec * lay.v,
                     slowdown=stack.comm_compute_slowdown if share else 0.0) for phase in ("fw", "bw")]


def _stream_tasks(items, lay, reg, coster, fw_s: float, bw_s: float) -> list:
    """Weight streaming (Cerebras, hardware.md §7): each micro-batch streams the weights in for the
    forward and again for the backward, and the gradients out, over the system I/O (full duplex),
    overlapped with the wafer's work on the layers already there (``fw_s`` / ``bw_s``: the phase's
    duration with everything else in it — its own link runs beside the fabric's collectives)."""
    store = coster.device.memory_external
    if store is None:
        return []
    params = sum(op.param_count * n for op, n, _, _ in items) / lay.tp
    rate = store.bandwidth_bytes_per_s.value * coster.eff.link_bandwidth_fraction
    w, g = params * reg.weight_bytes, params * reg.grad_bytes
    return [CommTask("stream", "weights-in", "fw", w, w / rate, 1, overlap_s=fw_s),
            CommTask("stream", "weights-in+grads-out", "bw", max(w, g), max(w, g) / rate, 1, overlap_s=bw_s)]


def _exposed(tasks, phases) -> float:
    return sum(t.exposed_s for t in tasks if t.phase in phases)


def microbatch_comm(items, cfg, lay, reg: Regime, comm, coster, stage: int, last_op: Op,
                    fw_s: float = 0.0, bw_s: float = 0.0, pm=None, units: FsdpUnits | None = None) -> tuple:
    """``items``: (op, count, repeated, name) of the stage (model_index); ``fw_s`` / ``bw_s``: the
    forward / backward (+ recompute) compute of one micro-batch; ``pm``: the stage's ParamMemory
    (ZeRO-3 gathers its parameters in ``units``: parallel/fsdp_units.py; one unit by default)."""
    skip = early_stop_skips(cfg, coster.model)
    local = (_tp_tasks(items, cfg, lay, reg, comm, skip) + _cp_tasks(items, lay, reg, comm, coster)
             + _ep_tasks(items, cfg, lay, reg, comm) + _pp_tasks(last_op, cfg, lay, reg, comm, stage))
    back = ("bw", "recompute")
    fw_d, bw_d = fw_s + _exposed(local, ("fw",)), bw_s + _exposed(local, back)
    gathers = fsdp_gathers(pm, cfg, lay, reg, comm, fw_d, bw_d, units or FsdpUnits(1)) if pm is not None else []
    fw_d, bw_d = fw_d + _exposed(gathers, ("fw",)), bw_d + _exposed(gathers, back)
    return tuple(local + gathers + _stream_tasks(items, lay, reg, coster, fw_d, bw_d))


def _bucketed_exposed(total_s: float, bytes_: float, bucket_bytes: float, hide_s: float) -> float:
    """Exposed time of bucketed gradient sync overlapped with ``hide_s`` of backward compute: the shared
    rule (chunk_sync.bucketed_exposed_s) over the sync's buckets, as one share."""
    return float(bucketed_exposed_s(total_s, share_buckets(bytes_, bucket_bytes, 1), hide_s))


def _accumulated_reductions(cfg, lay, kind: str, grad_bytes: float, total_s: float, hide_s: float,
                            bucket_bytes: float, root: tuple[float, float] = (0.0, 0.0)) -> list:
    """The m − 1 reductions a stack that syncs every micro-batch (``Stack.syncs_every_micro_batch``)
    runs before the step's last one, each hidden behind its own micro-batch's backward on the stage
    (``hide_s``: all its chunks, less the parameter gathers on the same link) as the last one is behind
    the step's last backward task, and each with the root unit's reduction (``root``: bytes, seconds)
    exposed after it. Charged with the step's sync (phase ``accum``). Not under pipelining:
    PyTorch's pipeline schedules turn FSDP's gradient sync on for each stage's last backward only."""
    extra = lay.micro_batches - 1 if lay.pp == 1 else 0
    if not cfg.stack.syncs_every_micro_batch(cfg.zero_stage) or extra < 1:
        return []
    slow = cfg.stack.comm_compute_slowdown
    exposed = _bucketed_exposed(total_s, grad_bytes, bucket_bytes, hide_s) if cfg.dp_overlap else total_s
    out = [CommTask("dp", kind, "accum", grad_bytes, total_s, extra, overlap_s=extra * (total_s - exposed),
                    slowdown=slow)]
    if root[0] > 0:
        out.append(CommTask("dp", kind, "accum-root", root[0], root[1], extra, slowdown=slow))
    return out


def step_comm(pm, cfg, lay, reg: Regime, comm, fw_task_s: float, bw_task_s: float, gather_s: float = 0.0,
              windows: ChunkWindows = ONE_CHUNK, units: FsdpUnits | None = None) -> tuple:
    """Data-parallel sync of one step for this stage's ranks. ``bw_task_s``: the rank's last
    backward task (one chunk of the last micro-batch, everything in it), all that can hide the
    gradient sync of the last chunk to finish — less ``gather_s``, the time ZeRO-3's parameter
    gathers hold the same link in that task; ``fw_task_s``: the rank's first forward task, behind
    which the overlapped ZeRO-1/2 parameter all-gather runs (phase ``step-start``). ``windows``: where
    a rank holds several chunks, when each chunk's share of the sync can run (parallel/chunk_sync.py).
    ``units``: ZeRO-3's units (parallel/fsdp_units.py): a root unit's reduction runs after the
    backward's last op, exposed (phase ``step-root``)."""
    group = lay.dp * lay.cp
    if group == 1 or pm.trainable_count == 0:
        return ()
    stack = cfg.stack
    slow = stack.comm_compute_slowdown
    grad_bytes, bucket, root_bytes = grad_sync_units(pm, cfg, reg, units or FsdpUnits(1))
    hide = max(0.0, bw_task_s - gather_s)
    out = []
    kind = "allreduce" if cfg.zero_stage == 0 else "reducescatter"
    total = comm.dp_s(kind, grad_bytes)
    exposed = float(grad_sync_exposed_s(total, grad_bytes, bucket, fw_task_s, hide, windows)) \
        if cfg.dp_overlap else total
    out.append(CommTask("dp", kind, "step", grad_bytes, total, 1, overlap_s=total - exposed, slowdown=slow))
    root = (root_bytes, comm.dp_s(kind, root_bytes)) if root_bytes > 0 else (0.0, 0.0)
    if root_bytes > 0:
        out.append(CommTask("dp", kind, "step-root", root_bytes, root[1], 1, slowdown=slow))
    out.extend(_accumulated_reductions(cfg, lay, kind, grad_bytes, total, max(0.0, bw_task_s - gather_s) * lay.v,
                                       bucket, root))
    if 1 <= cfg.zero_stage < 3:
        param_bytes = pm.params_count * reg.weight_bytes
        ag = comm.dp_s("allgather", param_bytes)
        if cfg.dp_overlap:  # Megatron-Core --overlap-param-gather: bucketed gathers hidden behind the next forward
            exposed = float(gather_exposed_s(ag, param_bytes, cfg.dp_bucket_bytes, fw_task_s, bw_task_s, windows))
            out.append(CommTask("dp", "allgather", "step-start", param_bytes, ag, 1, overlap_s=ag - exposed,
                                slowdown=slow))
        else:
            out.append(CommTask("dp", "allgather", "step", param_bytes, ag, 1, slowdown=slow))
    return tuple(out)

