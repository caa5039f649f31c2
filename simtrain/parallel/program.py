"""Sharding: Model × TrainConfig × Cluster → the per-rank program both engines execute.

The program is stored in its symmetric summary: ranks of one pipeline stage do the same work, so one
``StageProgram`` per stage holds the per-micro-batch work of that stage — compute seconds by phase,
the collectives inside each phase (tp / cp / ep), the pipeline sends, the data-parallel gradient
sync and the optimizer step. ``estimate`` composes it through the schedule's exact evaluation
(parallel/schedule.py ``pipeline_finish_s``); the simulator expands the same records into
per-micro-batch tasks run in the same order (``rank_order``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from simtrain.cost.compute import cold_call_scale
from simtrain.cost.memory import ParamMemory
from simtrain.cost.op_cost import OpCost, op_cost, saved_bytes
from simtrain.cost.precision import Regime
from simtrain.cost.realisation import attention_realised
from simtrain.glossary import OpClass
from simtrain.graph.model import Model
from simtrain.graph.op import Op
from simtrain.parallel.cold_calls import ColdCalls, cold_calls
from simtrain.parallel.comm_tasks import CommTask, microbatch_comm, step_comm
from simtrain.parallel.fsdp_comm import fsdp_copy_out_s, fsdp_reduce_copy_in_s, reduce_copy_in_share
from simtrain.parallel.fsdp_units import fsdp_units
from simtrain.parallel.layout import Layout
from simtrain.parallel.model_index import model_index
from simtrain.parallel.recompute import (
    early_stop_skips,
    in_layer,
    local_name,
    op_sac_roles,
    recomputed_count,
    selected,
)
from simtrain.parallel.schedule_orders import ChunkWindows, chunk_windows
from simtrain.parallel.stage_state import stage_optimizer_seconds, stage_param_memory
from simtrain.specs.efficiency import Efficiency
from simtrain.specs.hardware import Cluster
from simtrain.specs.stack import Stack
from simtrain.specs.train import TrainConfig

__all__ = ["CommTask", "StageProgram", "RankProgram", "Layout", "stage_program", "stage_compute"]


@dataclass(frozen=True)
class StageProgram:
    """Per-micro-batch work of one pipeline stage (all its chunks), and its per-step work."""

    stage: int
    blocks: tuple[str, ...]
    fw_s: float
    bw_s: float
    recompute_s: float
    fw_flops: float
    bw_flops: float
    recompute_flops: float
    comm: tuple[CommTask, ...]
    """Per micro-batch: tp / cp / ep collectives and the pp sends."""
    step_comm: tuple[CommTask, ...]
    """Per step: the data-parallel gradient sync (and ZeRO gathers)."""
    optimizer_s: float
    params: ParamMemory
    memory_bound_s: float = 0.0
    """Per micro-batch seconds of memory-bound ops (fw + bw)."""
    op_times: tuple[tuple[str, str, float, str], ...] = field(default=())
    """(name, kind, seconds per micro-batch incl. fw + bw + recompute, op class) of the stage's ops."""
    kernels: float = 0.0
    """Kernels one micro-batch launches on this stage (fw + bw + recompute): what a per-kernel gap
    costs (cost/realisation.py)."""
    wgrad_s: float = 0.0
    """Per micro-batch seconds of the weight-gradient half of ``bw_s`` (the W task of a split
    schedule: parallel/schedule.py ``SPLIT_BACKWARD``)."""

    def exposed_comm_s(self, phase: str | None = None) -> float:
        return sum(t.exposed_s for t in self.comm if phase is None or t.phase == phase)

    @functools.cached_property
    def microbatch_s(self) -> float:
        """Critical-path seconds of one micro-batch through this stage (fw + bw + recompute + comm)."""
        return self.forward_s + self.backward_s

    @functools.cached_property
    def forward_s(self) -> float:
        """Seconds of one micro-batch's forward on this stage (all its chunks), sends included."""
        return self.fw_s + self.exposed_comm_s("fw")

    @functools.cached_property
    def backward_s(self) -> float:
        """Seconds of one micro-batch's backward (+ recomputation) on this stage, sends included."""
        return self.bw_s + self.recompute_s + self.exposed_comm_s("bw") + self.exposed_comm_s("recompute")

    def compute_side_s(self, phases: tuple[str, ...]) -> float:
        """Compute seconds of the phases with the interference their hidden collectives cost (pp
        sends apart: a send's interference is part of its own blocking time, sim/recipe.py)."""
        own = {"fw": self.fw_s, "bw": self.bw_s, "recompute": self.recompute_s}
        hidden = sum(t.slowdown * min(t.total_s, t.overlap_s) for t in self.comm
                     if t.phase in phases and t.axis != "pp")
        return sum(own[ph] for ph in phases) + hidden

    def task_seconds(self, v: int) -> dict[str, float]:
        """Seconds of one chunk's task of each kind (parallel/schedule.py ``TASK_KINDS``): F and B as
        the schedules without a split run them; I = B − W and W (``wgrad_s``) where the backward is
        split; an overlapped forward / backward pair (Fo then Bo) takes max(the two computes, the two
        exposed communications) — DeepSeek-V3 §3.2.1: the all-to-all and pipeline sends of one hide
        behind the other's compute."""
        f, b, w = self.forward_s / v, self.backward_s / v, self.wgrad_s / v
        fc, bc = self.compute_side_s(("fw",)) / v, self.compute_side_s(("bw", "recompute")) / v
        pair = max(fc + bc, (f - fc) + (b - bc))
        return {"F": f, "B": b, "I": b - w, "W": w, "Fo": fc, "Bo": pair - fc}

    @functools.cached_property
    def sync_before_s(self) -> float:
        """Exposed per-step sync before the rank's first forward (overlapped parameter all-gather)."""
        return sum(t.exposed_s for t in self.step_comm if t.phase == "step-start")

    @functools.cached_property
    def sync_after_s(self) -> float:
        """Exposed per-step sync after the rank's last backward (gradient reduction, gathers)."""
        return sum(t.exposed_s for t in self.step_comm if t.phase != "step-start")


@dataclass(frozen=True)
class RankProgram:
    layout: Layout
    stages: tuple[StageProgram, ...]
    regime: Regime
    cfg: TrainConfig | None = None
    """The resolved config the program was built from (its ``stack`` the resolved Stack: resolve.py)."""
    efficiency: Efficiency | None = None
    """The device's effective profile it was costed with (resolve.py)."""


class _OpCoster:
    """Memoised op costs for one (device, regime, layout), kept with the model's index so a sweep
    re-uses them across estimates (keyed by the device object itself, which is immutable)."""

    def __init__(self, cluster: Cluster, reg: Regime, lay: Layout, sp: bool, model: Model | None, moe_imbalance: float,
                 stack: Stack, efficiency: Efficiency) -> None:
        """``stack`` and ``efficiency``: the resolved ones (resolve.py), never looked up here."""
        self.device, self.reg, self.lay, self.sp, self.imbalance = cluster.device, reg, lay, sp, moe_imbalance
        self.stack, self.model = stack, model
        self.eff = attention_realised(efficiency, stack.attention_realisation)
        self.micro = lay.micro_batch / lay.cp  # context parallelism splits every sequence cp ways
        key = ("costs", id(self.device), reg.precision, self.micro, lay.tp, sp, lay.ep, moe_imbalance, stack)
        memo = model_index(model).memo if model is not None else {}
        self.saved_set = 0.0
        if self.eff.cache_bytes > 0:  # only a cache tier reads it; kept with the model like the op costs
            skey = ("saved_set", reg.precision, self.micro, lay.tp, sp, lay.ep)
            if skey not in memo:
                memo[skey] = saved_set_bytes(model, self.micro, reg, lay, sp)
            self.saved_set = memo[skey]
        entry = memo.get(key)
        if entry is None or entry[0] is not self.device:  # id reuse after a device was freed
            entry = memo[key] = (self.device, {}, self._cold_calls(model))
        self.cache: dict[int, OpCost] = entry[1]
        self.cold: ColdCalls | None = entry[2]

    def _cold_calls(self, model: Model | None) -> ColdCalls | None:
        """Each op's in-step launch cost at its gap, where the profile measured how it grows with the
        gap (``Efficiency.step_call_half_gap_s``; parallel/cold_calls.py); None: every launch pays
        ``step_call_overhead_s``."""
        if model is None or self.eff.step_call_half_gap_s <= 0 or self.eff.step_call_overhead_s <= 0:
            return None
        return cold_calls(model, lambda op: self._op_cost(op, 0.0), self.eff)

    def _op_cost(self, op: Op, call_overhead_s: float | None) -> OpCost:
        return op_cost(op, self.micro, self.reg, self.device, self.eff, self.lay.tp, self.sp, self.lay.ep,
                       self.imbalance, self.stack, self.saved_set, call_overhead_s)

    @property
    def optimizer_cold_scale(self) -> float:
        """Factor on ``Efficiency.step_optimizer_s``: the optimizer's code last ran a step ago, this
        rank's micro-batches of its share of the layers (1.0 without a gap law)."""
        if self.cold is None:
            return 1.0
        return cold_call_scale(self.cold.cycle_s * self.lay.micro_batches / self.lay.pp, self.eff)

    def __call__(self, op: Op) -> OpCost:
        key = id(op)  # representatives from the model index: one object per distinct op
        c = self.cache.get(key)
        if c is None:
            c = self._op_cost(op, self.cold.of(op, self.eff) if self.cold is not None else None)
            self.cache[key] = c
        return c


def saved_set_bytes(model: Model | None, micro: float, reg: Regime, lay: Layout, sp: bool) -> float:
    """Activations the whole model saves for backward, per micro-batch on one rank: the backward's
    working set for a cache tier. Under 1F1B a stage holds up to p micro-batches of its L/p layers in
    flight, about one micro-batch of the whole model, so the whole model is taken for every layout."""
    if model is None:
        return 0.0
    return sum(saved_bytes(op, micro, reg, lay.tp, sp, lay.ep) for op in model.ops)


def _recompute_share(op: Op, cfg: TrainConfig, repeated: bool, model: Model | None) -> float:
    """Share of ``op``'s forward re-run in the backward under the config's recomputation policy (none
    for an op outside autograd: no backward asks for its output)."""
    if not op.has_backward:
        return 0.0
    policy = str(cfg.recompute)
    if policy == "full":
        return float(repeated)
    if policy == "selective":
        return float(selected(op, cfg.recompute_modules))
    if policy == "selective-op" and model is not None and in_layer(op):
        role = op_sac_roles(model).get(local_name(op))
        return 1.0 if role is None else role.recompute_fraction
    return 0.0


_MEMO_MAX = 50_000


def _setting_key(cfg: TrainConfig) -> tuple:
    """The TrainConfig fields a stage's program depends on (besides the layout)."""
    modules = None if cfg.recompute_modules is None else tuple(cfg.recompute_modules)
    return (str(cfg.recompute), modules, cfg.recompute_num_layers, cfg.recompute_every_k_blocks, cfg.sequence_parallel, str(cfg.precision),
            str(cfg.optimizer), cfg.fused_optimizer, cfg.optimizer_impl, "fused_optimizer" in cfg.model_fields_set,
            cfg.zero_stage, cfg.reshard_after_forward, tuple(cfg.frozen_prefixes), cfg.dp_overlap,
            cfg.dp_bucket_bytes, cfg.moe_load_imbalance, cfg.stack, cfg.grad_clipping, cfg.zero_grad_to_none)


def stage_program(stage: int, blocks: tuple[str, ...], model: Model, cluster: Cluster, cfg: TrainConfig,
                  lay: Layout, comm, coster: _OpCoster) -> StageProgram:
    """Cost one stage (memoised with the model: a pure function of the blocks, layout, settings,
    device and communication model)."""
    memo = model_index(model).memo
    key = ("stage", blocks, lay, id(comm), id(cluster.device), _setting_key(cfg), _windows(stage, cfg, lay))
    hit = memo.get(key)
    if hit is not None and hit[0] is comm and hit[1] is cluster.device:
        return hit[2] if hit[2].stage == stage else dataclasses.replace(hit[2], stage=stage)
    program = _stage_program(stage, blocks, model, cluster, cfg, lay, comm, coster)
    if len(memo) > _MEMO_MAX:  # a long sweep: start over rather than grow without bound
        memo.clear()
    memo[key] = (comm, cluster.device, program)
    return program


def _windows(stage: int, cfg: TrainConfig, lay: Layout) -> ChunkWindows:
    """When each of the rank's chunks can run its share of the step's data-parallel sync."""
    return chunk_windows(stage, lay.pp, lay.micro_batches, cfg.pipeline_schedule, lay.v)


def _stage_program(stage: int, blocks: tuple[str, ...], model: Model, cluster: Cluster, cfg: TrainConfig,
                   lay: Layout, comm, coster: _OpCoster) -> StageProgram:
    """Cost one stage: compute by phase, its collectives, dp sync and optimizer (``cfg`` resolved:
    its stack is ``cfg.stack``)."""
    reg, stack = coster.reg, cfg.stack
    items = model_index(model).items(blocks)
    fw, bw, rc, fwf, bwf, rcf, mem, fwk, bwk, rck, times, wg = stage_compute(items, cfg, coster)
    pm = stage_param_memory(model, blocks, items, cfg, lay, reg)
    units = fsdp_units(model, blocks, cfg, lay)  # ZeRO-3's gather / reduce units (a root unit apart)
    copy_fw, copy_bw = fsdp_copy_out_s(pm, cfg, lay, reg, coster, units)  # FSDP2's copy-out: compute stream
    if copy_fw + copy_bw > 0:  # memory-bound work of its own, listed beside the ops
        fw, bw, mem = fw + copy_fw, bw + copy_bw, mem + copy_fw + copy_bw
        times.append(("fsdp/gather copy-out", "fsdp_copy_out", copy_fw + copy_bw, str(OpClass.MEMORY)))
    # FSDP2's gradient copy-in, waited for by the compute stream, in each backward that reduces
    copy_in = fsdp_reduce_copy_in_s(pm, cfg, lay, reg, coster, units) * reduce_copy_in_share(cfg, lay)
    if copy_in > 0:
        bw, mem = bw + copy_in, mem + copy_in
        times.append(("fsdp/reduce copy-in", "fsdp_copy_in", copy_in, str(OpClass.MEMORY)))
    mb_comm = microbatch_comm(items, cfg, lay, reg, comm, coster, stage, _last_op(model, blocks), fw, bw + rc,
                              pm, units)
    exp_fw = sum(t.exposed_s for t in mb_comm if t.phase == "fw")
    exp_bw = sum(t.exposed_s for t in mb_comm if t.phase in ("bw", "recompute"))
    # the CPU dispatches the phase's compute and collectives alike: host time beside (or before) all of it
    fw = host_bound_s(fw, fwk, stack, exp_fw)
    if stack.gpu_waits_on_cpu:
        bw, rc = host_bound_s(bw, bwk, stack), host_bound_s(rc, rck, stack)
    else:  # a backward and its recomputation are one task: one launch queue, one wait
        bw = host_bound_s(bw, bwk + rck, stack, rc + exp_bw)
    gathers = sum(t.total_s for t in mb_comm if t.axis == "dp" and t.phase == "bw")
    # the last backward task (one of v chunks) hides the gradient sync, the first forward task the gathers;
    # a rank with several chunks syncs each on its own, behind its other tasks (parallel/chunk_sync.py)
    dp_comm = step_comm(pm, cfg, lay, reg, comm, (fw + exp_fw) / lay.v, (bw + rc + exp_bw) / lay.v, gathers / lay.v,
                        _windows(stage, cfg, lay), units)
    opt_s = stage_optimizer_seconds(pm.trainable_count, items, cfg, lay, reg, coster)
    return StageProgram(stage, blocks, fw, bw, rc, fwf, bwf, rcf, mb_comm, dp_comm, opt_s, pm, mem, tuple(times),
                        fwk + bwk + rck, wg)


def stage_compute(items, cfg: TrainConfig, coster: _OpCoster) -> tuple:
    """Per-micro-batch compute of ``items`` (model_index items): seconds fw / bw / recompute, their
    FLOPs, memory-bound seconds, kernel counts, the per-op times and the weight-gradient seconds
    (part of bw) — Σ count × op cost (the
    vectorized estimate, search/vector_core.py, calls it per block, so both paths share this rule)."""
    fw = bw = rc = fwf = bwf = rcf = mem = fwk = bwk = rck = wg = 0.0
    times = []
    skip = early_stop_skips(cfg, coster.model)
    for op, n, repeated, name in items:
        c = coster(op)
        share = 0.0 if op.name in skip else _recompute_share(op, cfg, repeated, coster.model)
        fw, bw, fwf, bwf, mem = fw + n * c.fw_s, bw + n * c.bw_s, fwf + n * c.fw_flops, bwf + n * c.bw_flops, \
            mem + n * c.memory_bound_s
        fwk, bwk, wg = fwk + n * c.fw_kernels, bwk + n * c.bw_kernels, wg + n * c.wgrad_s
        again = (recomputed_count(n, cfg) if str(cfg.recompute) == "full" else n) if share else 0
        r = again * share  # a fused projection re-runs part of its matmuls: that share of its time and FLOPs
        rc, rcf, rck = rc + r * c.fw_s, rcf + r * c.fw_flops, rck + again * c.fw_kernels
        times.append((name if n > 1 else op.name, op.kind, n * (c.fw_s + c.bw_s) + r * c.fw_s, str(op.op_class)))
    return fw, bw, rc, fwf, bwf, rcf, mem, fwk, bwk, rck, times, wg


def host_bound_s(gpu_s: float, kernels: float, stack: Stack, beside_s: float = 0.0) -> float:
    """A phase's compute seconds when the CPU must dispatch ``kernels`` kernels at
    ``stack.host_dispatch_s`` each: the CPU runs ahead through the launch queue, so the slower of the
    two sets the pace — the GPU's side being its compute plus ``beside_s`` (the phase's exposed
    collectives, whose kernels sit in the same queue): the GPU waits max(0, CPU − GPU − beside) on
    top of its compute; when the GPU waits on every dispatch (``gpu_waits_on_cpu``) the two add."""
    cpu_s = kernels * stack.host_dispatch_s
    if stack.gpu_waits_on_cpu:
        return gpu_s + cpu_s
    return gpu_s + max(0.0, cpu_s - gpu_s - beside_s)


def _last_op(model: Model, blocks: tuple[str, ...]) -> Op:
    """The op whose output crosses to the next pipeline stage (the last op of the stage's last block)."""
    return model_index(model).block_last[blocks[-1]]
