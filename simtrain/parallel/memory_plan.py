"""Memory of one pipeline stage's ranks: parameter side (ZeRO-sharded) + activations of the
micro-batches in flight under the schedule + buffers + the documented overhead allowance."""

from __future__ import annotations

from simtrain.cost.memory import activation_bytes_per_microbatch, backward_working_bytes
from simtrain.parallel.model_index import model_index
from simtrain.parallel.schedule import in_flight_microbatches
from simtrain.report.step_report import MemoryReport

__all__ = ["stage_memory"]


def stage_memory(stage, model, cluster, cfg, program) -> MemoryReport:
    lay, reg = program.layout, program.regime
    micro = lay.micro_batch / lay.cp
    sp, k = cfg.sequence_parallel, cfg.recompute_every_k_blocks
    recompute = str(cfg.recompute)
    if recompute == "full":
        block_set = set(stage.blocks)
        ops = tuple(op for op in model.ops if op.block in block_set)
        per_mb = activation_bytes_per_microbatch(ops, micro, reg, recompute, lay.tp, sp, lay.ep, k)
    else:
        items = model_index(model).items(stage.blocks)
        ops = tuple(op for op, _, _, _ in items)
        per_mb = activation_bytes_per_microbatch(ops, micro, reg, recompute, lay.tp, sp, lay.ep, k,
                                                 counts=tuple(n for _, n, _, _ in items))
    in_flight = in_flight_microbatches(stage.stage, lay.pp, lay.micro_batches, cfg.pipeline_schedule, lay.v)
    activations = per_mb * in_flight
    buffers = backward_working_bytes(ops, micro, reg, recompute, lay.tp, sp, lay.ep, k)
    sample_bytes = cfg.data.device_bytes_per_sample or cfg.data.sample_bytes or 0.0
    buffers += sample_bytes * lay.micro_batch * (2 if cfg.data.pin_memory and cfg.data.prefetch else 1)
    if cfg.zero_stage >= 3:
        # one layer's full parameters gathered, plus the next one prefetched
        largest = max((op.param_count for op in ops), default=0)
        buffers += 2 * largest * reg.weight_bytes / lay.tp
    usable = cluster.device.usable_memory_bytes
    host_prefetch = sample_bytes * cfg.global_batch_size / lay.dp * cfg.data.prefetch_factor * cfg.data.num_workers \
        / max(lay.micro_batches, 1) if cfg.data.prefetch else 0.0
    rank = stage.stage * lay.dp * lay.tp * lay.cp  # first rank of the stage (pp is the outermost axis)
    pm = stage.params
    return MemoryReport(params_bytes=pm.params_bytes, grads_bytes=pm.grads_bytes,
                        optimizer_bytes=pm.optimizer_bytes, activations_bytes=activations,
                        buffers_bytes=buffers, overhead_bytes=cfg.memory_overhead_fraction * usable,
                        capacity_bytes=usable, rank=rank, stage=stage.stage, host_prefetch_bytes=host_prefetch)
