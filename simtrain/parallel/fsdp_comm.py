"""ZeRO-3 / FSDP's traffic per unit (parallel/fsdp_units.py): the parameter gathers of each micro-batch,
prefetched, with a root unit's apart; the compute-stream copies per-parameter FSDP adds around them
(FSDP2's copy-out after a gather, its gradient copy-in before a reduction); how a step's gradient
reduction splits between what hides behind the backward and a root unit's, exposed."""

from __future__ import annotations

from simtrain.cost.compute import memory_seconds
from simtrain.cost.precision import Regime
from simtrain.glossary import DTYPE_BYTES, DType, Precision
from simtrain.parallel.comm_task import CommTask
from simtrain.parallel.fsdp_units import FsdpUnits

__all__ = ["zero3_sharded", "fsdp_gathers", "fsdp_layer_gathers", "fsdp_root_gather", "fsdp_copy_out_s",
           "fsdp_reduce_copy_in_s", "gathered_bytes", "grad_sync_units", "reduce_copy_in_share", "reduced_grad_bytes",
           "prefetched_exposed_s"]


def zero3_sharded(pm, cfg, lay) -> bool:
    """Does the stage gather its parameters and reduce-scatter its gradients unit by unit (ZeRO-3 over
    more than one rank, with something to train)?"""
    return cfg.zero_stage >= 3 and lay.dp * lay.cp > 1 and pm.trainable_count > 0


def fsdp_gathers(pm, cfg, lay, reg: Regime, comm, fw_s: float, bw_s: float, units: FsdpUnits) -> list:
    """ZeRO-3 / FSDP: every forward and every backward (with its recomputation) of a micro-batch
    gathers the stage's parameters unit by unit (``units``: parallel/fsdp_units.py): the blocks'
    gathers (:func:`fsdp_layer_gathers`) and a root unit's (:func:`fsdp_root_gather`)."""
    if not zero3_sharded(pm, cfg, lay):
        return []
    root = fsdp_root_gather(pm, cfg, reg, comm, units)
    return fsdp_layer_gathers(pm, cfg, reg, comm, fw_s, bw_s, units) + ([root] if root is not None else [])


def fsdp_layer_gathers(pm, cfg, reg: Regime, comm, fw_s: float, bw_s: float, units: FsdpUnits) -> list:
    """The blocks' gathers of one micro-batch, prefetched ``fsdp_prefetch_layers`` ahead: each hides
    behind the previous block's share of the phase (``fw_s`` / ``bw_s``: its duration with the ops' own
    collectives), the first waited for; the backward's only when resharded after the forward."""
    if units.layers == 0:
        return []
    stack = cfg.stack
    param_bytes = gathered_bytes(pm, stack, reg)
    layers, per_layer = units.layers, (1.0 - units.root_share) * param_bytes / units.layers
    g = comm.dp_s("allgather", per_layer)
    out = []
    # without resharding after the forward, the backward finds every unit still gathered
    phases = (("fw", fw_s), ("bw", bw_s)) if cfg.reshard_after_forward else (("fw", fw_s),)
    for phase, window in phases:
        exposed = prefetched_exposed_s(g, window / layers, layers, stack.fsdp_prefetch_layers)
        out.append(CommTask("dp", "allgather", phase, per_layer, g, layers,
                            overlap_s=g * layers - exposed, slowdown=stack.comm_compute_slowdown))
    return out


def fsdp_root_gather(pm, cfg, reg: Regime, comm, units: FsdpUnits) -> CommTask | None:
    """A root unit's gather (``Stack.fsdp_root_unit``): once per micro-batch at the start of the
    forward, before anything it could hide behind, and kept through the backward (None: no root)."""
    if units.root_share <= 0:
        return None
    nbytes = units.root_share * gathered_bytes(pm, cfg.stack, reg)
    return CommTask("dp", "allgather", "fw", nbytes, comm.dp_s("allgather", nbytes), 1,
                    slowdown=cfg.stack.comm_compute_slowdown)


def _unit_copies_s(nbytes: float, units: FsdpUnits, coster, with_root: bool = True) -> tuple[float, float]:
    """(the blocks', the root's) compute-stream seconds of copying ``nbytes`` moved over all the stage's
    units, the root's share apart: one copy kernel per unit."""
    def copy_s(unit_bytes: float) -> float:
        return memory_seconds(unit_bytes, coster.device, coster.eff) + coster.eff.launch_overhead_s
    root = units.root_share * nbytes
    layers_s = units.layers * copy_s((nbytes - root) / units.layers) if units.layers else 0.0
    return layers_s, (copy_s(root) if with_root and root > 0 else 0.0)


def fsdp_copy_out_s(pm, cfg, lay, reg: Regime, coster, units: FsdpUnits) -> tuple[float, float]:
    """(forward, backward) compute-stream seconds per micro-batch of copying each gathered unit out of
    the all-gather buffer into its parameters (``Stack.fsdp_gather_copy_out``: FSDP2's
    ``foreach_all_gather_copy_out``): read and write every gathered byte, one copy kernel per unit,
    for each gather :func:`fsdp_gathers` issues (the backward's only when resharded after the forward;
    never the root's, kept gathered)."""
    if not (cfg.stack.fsdp_gather_copy_out and zero3_sharded(pm, cfg, lay)):
        return 0.0, 0.0
    layers_s, root_s = _unit_copies_s(2.0 * gathered_bytes(pm, cfg.stack, reg), units, coster)  # read + write
    return layers_s + root_s, layers_s if cfg.reshard_after_forward else 0.0


def fsdp_reduce_copy_in_s(pm, cfg, lay, reg: Regime, coster, units: FsdpUnits) -> float:
    """Compute-stream seconds of one gradient reduction's copy-in (``Stack.fsdp_reduce_copy_in``: FSDP2
    copies each unit's unsharded gradients into the reduce-scatter input in the reduce dtype and the
    compute stream waits for it): a read of every gradient element and a write in the reduce dtype
    (:func:`reduced_grad_bytes`), one kernel per unit (the blocks and a root unit)."""
    if not (cfg.stack.fsdp_reduce_copy_in and zero3_sharded(pm, cfg, lay)):
        return 0.0
    bytes_per_element = reg.grad_bytes + reduced_grad_bytes(cfg.stack, reg)
    return sum(_unit_copies_s(bytes_per_element * pm.trainable_count, units, coster))


def gathered_bytes(pm, stack, reg: Regime) -> float:
    """Bytes one pass of the stage's gathers moves per rank: every parameter in the compute dtype, or in
    fp8 where the stack gathers fp8 (``Stack.fp8_allgather``)."""
    if stack.fp8_allgather and str(reg.precision) == "fp8":
        return pm.params_count * DTYPE_BYTES[DType.FP8]  # gathered as fp8, cast once per step on the shard
    return pm.params_count * reg.weight_bytes


def grad_sync_units(pm, cfg, reg: Regime, units: FsdpUnits) -> tuple[float, float, float]:
    """(bytes reduced behind the backward, their bucket bytes, bytes of the root unit's reduction) of a
    step's gradient sync: with a root unit (``Stack.fsdp_root_unit``) each block's gradients are one
    reduce-scatter, launched as its backward ends, and the root's are reduced after the last op;
    otherwise the gradients go in ``dp_bucket_bytes`` buckets."""
    grad_bytes = pm.trainable_count * reduced_grad_bytes(cfg.stack, reg)
    if units.root_share <= 0:
        return grad_bytes, cfg.dp_bucket_bytes, 0.0
    if units.layers == 0:  # the root is the stage: one reduction after the last op, one bucket
        return grad_bytes, grad_bytes, 0.0
    root = units.root_share * grad_bytes
    return grad_bytes - root, (grad_bytes - root) / units.layers, root


def reduce_copy_in_share(cfg, lay) -> float:
    """Reductions per micro-batch's backward: one where the stack reduces every micro-batch (outside a
    pipeline), else the step's one reduction spread over its m micro-batches' backward."""
    return 1.0 if cfg.stack.syncs_every_micro_batch(cfg.zero_stage) and lay.pp == 1 else 1.0 / lay.micro_batches


def reduced_grad_bytes(stack, reg: Regime) -> float:
    """Bytes per gradient element on the wire of the data-parallel reduction: 4 when the stack reduces
    in fp32 in a mixed-precision regime (``Stack.grad_reduce_fp32``: True in every one, ``"bf16"`` in
    all but fp16's), else the regime's gradient."""
    mode = stack.grad_reduce_fp32
    wide = mode is True or (mode == "bf16" and reg.precision is not Precision.FP16)
    return float(DTYPE_BYTES[DType.FP32]) if wide and reg.master_bytes else float(reg.grad_bytes)


def prefetched_exposed_s(gather_s: float, compute_s: float, layers: int, prefetch: int) -> float:
    """Exposed seconds of per-layer parameter all-gathers over one pass of ``layers`` layers when
    each is issued ``prefetch`` layers ahead (FSDP / ZeRO-3): the first gather is always waited for;
    afterwards each layer's gather runs beside the previous layer's compute and shows only where it
    is longer. Without prefetch every gather is waited for."""
    if prefetch == 0:
        return layers * gather_s
    return gather_s + (layers - 1) * max(0.0, gather_s - compute_s)
