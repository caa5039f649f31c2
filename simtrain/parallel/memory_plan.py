"""Memory of one pipeline stage's ranks: parameter side (ZeRO-sharded over dp · cp) + activations of
the micro-batches in flight under the schedule + buffers (with the fp32 logits gradient on the loss
stage and, under ZeRO-3 / FSDP, the stage's gathered blocks) + the software stack's allocator model
(reserved = allocated · (1 + reserve fraction) + workspace) or, without one, the documented overhead
allowance."""

from __future__ import annotations

from simtrain.cost.memory import (
    LOSS_FP32_GRADIENTS,
    activation_bytes_per_microbatch,
    checkpoint_bytes,
    fp32_logits_grad_bytes,
    largest_gradient_bytes,
    metric_peak_bytes,
    op_sac_bytes,
    recompute_window_bytes,
)
from simtrain.parallel.fsdp_units import block_gather_elements, fsdp_units
from simtrain.parallel.model_index import REPEATED_BLOCK, model_index
from simtrain.parallel.recompute import op_sac_roles, recomputed_blocks
from simtrain.parallel.schedule import in_flight_microbatches
from simtrain.report.step_report import MemoryReport

__all__ = ["stage_memory", "stage_memories"]


def _activations_and_working(stage, model, cfg, lay, reg) -> tuple[float, float]:
    """(saved bytes per micro-batch, transient backward working bytes) of the stage's ranks, times the
    stack's ``transient_memory_scale`` (a calibrated correction; 1 by default)."""
    scale = cfg.stack.transient_memory_scale
    per_mb, working = _unscaled_activations_and_working(stage, model, cfg, lay, reg)
    # the metrics' loss runs after the backward, once the micro-batch's activations are freed: its peak
    # counts against theirs, as the working bytes that would top them up to it
    idx = model_index(model)
    items = idx.items(stage.blocks)
    metric = metric_peak_bytes(tuple(op for op, *_ in items), lay.micro_batch / lay.cp, reg, lay.tp,
                               tuple(n for _, n, *_ in items))
    return per_mb * scale, max(working, metric - per_mb) * scale


def _unscaled_activations_and_working(stage, model, cfg, lay, reg) -> tuple[float, float]:
    idx = model_index(model)
    micro, sp, recompute = lay.micro_batch / lay.cp, cfg.sequence_parallel, str(cfg.recompute)
    items = idx.items(stage.blocks)
    ops, counts = tuple(op for op, *_ in items), tuple(n for _, n, *_ in items)
    # two moments of the backward, not one: at its start the loss's fp32 logits gradient lives beside the
    # saved log-probabilities (counted with the activations); the largest op's gradients come later, once
    # the log-probabilities and the logits' gradients are freed (cast back, consumed by the head)
    loss_grads = LOSS_FP32_GRADIENTS[cfg.stack.loss_kernel]
    working = max(largest_gradient_bytes(ops, micro, reg, lay.tp, sp, lay.ep),
                  loss_grads * fp32_logits_grad_bytes(ops, micro, reg, lay.tp, counts))
    if recompute == "selective-op":
        return _op_sac_activations(stage, model, lay, reg, sp, working)
    if recompute != "full":
        modules = None if cfg.recompute_modules is None else tuple(cfg.recompute_modules)
        return activation_bytes_per_microbatch(ops, micro, reg, recompute, lay.tp, sp, lay.ep, counts,
                                               modules), working
    k = cfg.recompute_every_k_blocks or 1
    per_block_cache: dict[tuple, float] = {}
    per_block = []
    for b in stage.blocks:
        key = idx.block_items[b]
        if key not in per_block_cache:
            bops = tuple(idx.reps[s] for s, _ in key)
            per_block_cache[key] = activation_bytes_per_microbatch(
                bops, micro, reg, "none", lay.tp, sp, lay.ep, tuple(n for _, n in key))
        per_block.append(per_block_cache[key])
    dropped = recomputed_blocks(stage.blocks, cfg)
    if len(dropped) < len(stage.blocks):  # recompute_num_layers: the other layers keep everything
        kept = checkpoint_bytes([idx.block_first[b] for b in stage.blocks if b in dropped], micro, reg, lay.tp, sp)
        kept += sum(a for b, a in zip(stage.blocks, per_block, strict=True) if b not in dropped)
        return kept, working + recompute_window_bytes([a for b, a in zip(stage.blocks, per_block, strict=True)
                                                       if b in dropped] or [0.0])
    kept = checkpoint_bytes([idx.block_first[b] for b in stage.blocks], micro, reg, lay.tp, sp, k)
    return kept, working + recompute_window_bytes(per_block, k)


def _op_sac_activations(stage, model, lay, reg, sp: bool, working: float) -> tuple[float, float]:
    """Per-op selective AC: each transformer layer keeps its input and the outputs its policy saves;
    the blocks outside the layers (embedding, head, loss) are not checkpointed and keep everything.
    In the backward one layer at a time is re-run: its full activations are the transient window."""
    idx, micro = model_index(model), lay.micro_batch / lay.cp
    roles = op_sac_roles(model)
    kept, layers_full = 0.0, []
    for b in stage.blocks:
        key = idx.block_items[b]
        bops, counts = tuple(idx.reps[s] for s, _ in key), tuple(n for _, n in key)
        full = activation_bytes_per_microbatch(bops, micro, reg, "none", lay.tp, sp, lay.ep, counts)
        if b.startswith("layers."):
            kept += op_sac_bytes(bops, roles, micro, reg, lay.tp, sp, lay.ep, counts)
            layers_full.append(full)
        else:
            kept += full
    return kept, working + recompute_window_bytes(layers_full or [0.0])


def stage_memories(model, cluster, cfg, program) -> list[MemoryReport]:
    """Memory of every stage; stages with the same ops share the per-micro-batch work. The settings
    are the program's resolved config (``program.cfg``; ``cfg`` only for a hand-made program)."""
    cfg = program.cfg if program.cfg is not None else cfg
    idx, lay = model_index(model), program.layout
    # pure in these inputs, so kept with the model across estimates (a sweep revisits them); the
    # stack's loss kernel is among them; its other memory knobs (reserve, workspace, fsdp prefetch) and the ZeRO degree dp · cp act in
    # stage_memory / the program's param memory, outside this memo, so they need no place in its key
    setting = (lay.micro_batch, lay.cp, lay.tp, lay.ep, cfg.sequence_parallel, str(cfg.recompute),
               None if cfg.recompute_modules is None else tuple(cfg.recompute_modules), cfg.recompute_num_layers,
               cfg.recompute_every_k_blocks, program.regime.precision, cfg.stack.loss_kernel,
               cfg.stack.transient_memory_scale)
    memo = idx.memo.setdefault(("activations", setting), {})
    out = []
    for st in program.stages:
        key = idx.shape_key(st.blocks)
        if key not in memo:
            memo[key] = _activations_and_working(st, model, cfg, lay, program.regime)
        out.append(stage_memory(st, model, cluster, cfg, program, memo[key]))
    return out


def stage_memory(stage, model, cluster, cfg, program, per_mb_and_working=None) -> MemoryReport:
    cfg = program.cfg if program.cfg is not None else cfg
    lay, reg = program.layout, program.regime
    per_mb, buffers = per_mb_and_working or _activations_and_working(stage, model, cfg, lay, reg)
    in_flight = in_flight_microbatches(stage.stage, lay.pp, lay.micro_batches, cfg.pipeline_schedule, lay.v)
    sample_bytes = cfg.data.device_bytes_per_sample or cfg.data.sample_bytes or 0.0
    buffers += sample_bytes * lay.micro_batch * (2 if cfg.data.pin_memory and cfg.data.prefetch else 1)
    stack = cfg.stack
    store = cluster.device.memory_external
    if cfg.zero_stage >= 3 and store is None:  # a streaming device holds no weights to shard and gather
        window = stack.fsdp_prefetch_layers if cfg.reshard_after_forward else len(stage.blocks)
        buffers += gathered_params_bytes(stage, model, cfg, lay, reg, window)
    usable = cluster.device.usable_memory_bytes
    host_prefetch = 0.0
    if cfg.data.prefetch:  # DataLoader workers keep prefetch_factor micro-batches each, in host DRAM
        host_prefetch = sample_bytes * lay.micro_batch * cfg.data.prefetch_factor * cfg.data.num_workers
    rank = stage.stage * lay.dp * lay.tp * lay.cp  # first rank of the stage (pp is the outermost axis)
    pm = stage.params
    params, grads, optim, external, ext_cap = pm.params_bytes, pm.grads_bytes, pm.optimizer_bytes, 0.0, None
    if store is not None:
        # weight streaming (Cerebras MemoryX, hardware.md §7): weights, gradients and optimizer state
        # stay off-wafer; the wafer holds activations and the layers being streamed (two largest blocks)
        external, ext_cap = params + grads + optim, store.usable_bytes
        idx = model_index(model)
        per_block = sorted((sum(idx.reps[s].param_count * n for s, n in idx.block_items[b]) for b in stage.blocks),
                           reverse=True)
        buffers += sum(per_block[:2]) * (reg.weight_bytes + reg.grad_bytes)
        params = grads = optim = 0.0
    return MemoryReport(params_bytes=params, grads_bytes=grads, optimizer_bytes=optim,
                        activations_bytes=per_mb * in_flight, buffers_bytes=buffers,
                        overhead_bytes=overhead_fraction(cfg, stack) * usable, capacity_bytes=usable, rank=rank,
                        stage=stage.stage, host_prefetch_bytes=host_prefetch, external_bytes=external,
                        external_capacity_bytes=ext_cap, reserve_fraction=stack.allocator_reserve_fraction,
                        workspace_bytes=stack.workspace_bytes)


def overhead_fraction(cfg, stack) -> float:
    """The generic allowance (TrainConfig.memory_overhead_fraction of usable memory) applies when the
    stack has no allocator model (reserve fraction and workspace both 0: the reference stack, as
    before stacks existed). A stack's model replaces it — reserved = allocated · (1 + f) + w, PyTorch
    CUDA caching allocator ("CUDA semantics — Memory management": reserved ≥ allocated) plus the
    CUDA context / NCCL / cuBLAS workspaces — unless the user set the fraction explicitly."""
    has_model = stack.allocator_reserve_fraction > 0 or stack.workspace_bytes > 0
    if has_model and "memory_overhead_fraction" not in cfg.model_fields_set:
        return 0.0
    return cfg.memory_overhead_fraction


def gathered_params_bytes(stage, model, cfg, lay, reg, prefetch_layers: int = 1) -> float:
    """ZeRO-3 / FSDP: the unsharded weights of the wrapping units (blocks) gathered at once on this
    stage's ranks — the block in use plus ``prefetch_layers`` prefetched ahead (FSDP forward /
    backward prefetch; Stack.fsdp_prefetch_layers, 1 by default): the largest sum of 1 + prefetch
    *consecutive* blocks of this pipeline stage, in execution order (a block is released once used,
    so the embedding and the LM head at the two ends of the stage are never gathered together; each
    stage gathers only its own blocks, sharded over its own dp · cp group; Rajbhandari et al. 2020
    §5.3: parameters are all-gathered per layer, used, then released). Each block's weights are this
    rank's tensor / expert share (fsdp_units.block_gather_elements), in the compute dtype.

    A stack whose FSDP root unit holds the embeddings and the head together (``Stack.fsdp_root_unit``,
    parallel/fsdp_units.py) keeps them gathered from the first forward to the end of the backward: at
    the loss's backward, where a step without recomputation peaks, the root is in use and the
    ``prefetch_layers`` largest blocks are gathered beside it."""
    per_block = block_gather_elements(model, stage.blocks, lay, cfg.sequence_parallel)
    k = min(len(per_block), 1 + prefetch_layers)
    window = max((sum(per_block[i:i + k]) for i in range(len(per_block) - k + 1)), default=0.0)
    units = fsdp_units(model, stage.blocks, cfg, lay, per_block)
    if units.root_share > 0:
        layers = sorted((e for e, b in zip(per_block, stage.blocks, strict=True) if REPEATED_BLOCK.match(b)),
                        reverse=True)
        window = max(window, units.root_share * sum(per_block) + sum(layers[:prefetch_layers]))
    return window * reg.weight_bytes
