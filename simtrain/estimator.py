"""The analytical path: Model × Cluster × TrainConfig → StepReport, in closed form.

    step = max over pipeline ranks r of (exposed parameter gather before r's first forward
                                         + r's pipeline work and waits, to its last backward
                                         + r's exposed gradient sync + r's optimizer step)
           (+ data stall)

The per-stage work comes from the sharded per-rank program (parallel/program.py), the pipeline
composition from parallel/schedule.py (the schedule the simulator runs, evaluated exactly), memory
from cost/memory.py. Never raises for an infeasible
layout: the report comes back with ``feasible=False`` and the reasons.
"""

from __future__ import annotations

import dataclasses
import math

from simtrain.cost.data_pipeline import pipeline_times
from simtrain.cost.emulation import emulation_warning
from simtrain.cost.fpga import execution_problems
from simtrain.cost.realisation import hosts_of, interference_s, realisation_lines
from simtrain.errors import SimtrainError, SpecError
from simtrain.graph.model import Model
from simtrain.graph.summary import MATRIX_CLASSES
from simtrain.inputs import as_cluster, as_config, as_model
from simtrain.parallel.memory_plan import stage_memories
from simtrain.parallel.model_index import model_index
from simtrain.parallel.partition import partition_blocks
from simtrain.parallel.program import Layout, RankProgram, _OpCoster, stage_program
from simtrain.parallel.schedule import SPLIT_BACKWARD, pipeline_finish_s, rank_order, stage_chunks
from simtrain.report.explain import bottleneck_of, comm_reports, compute_by_class, top_ops
from simtrain.report.step_report import StepReport, full_load_watts
from simtrain.resolve import Resolved, prepare_model, resolve
from simtrain.specs.hardware import Cluster
from simtrain.specs.train import TrainConfig, layout_problems, resolve_dp

__all__ = ["estimate", "build_program", "program_of", "infeasible_report", "prepare_model"]


def infeasible_report(model: Model, cluster: Cluster, cfg: TrainConfig, reasons: list[str],
                      engine: str = "estimate") -> StepReport:
    return StepReport(model_name=model.name, cluster_name=cluster.name, devices_count=cluster.devices_count,
                      feasible=False, reasons=tuple(reasons), step_time_s=float("nan"),
                      global_batch_size=cfg.global_batch_size, tokens_per_sample=model.tokens_per_sample,
                      model_flops_per_step=float("nan"), hardware_flops_per_step=float("nan"),
                      peak_flops_per_s=float("nan"), time_breakdown_s={}, memory=None,
                      bottleneck="", bottleneck_reason="; ".join(reasons), device_name=cluster.device.name,
                      engine=engine)


def build_program(model: Model, cluster: Cluster, cfg: TrainConfig, comm=None) -> RankProgram | list[str]:
    """The per-rank program (one StageProgram per pipeline stage), or the reasons there is none: an
    entry of its own (plots, traces, the simulator's tests call it), so it resolves its inputs
    (:func:`simtrain.resolve.resolve`) and builds from them (:func:`program_of`)."""
    return program_of(resolve(model, cluster, cfg), comm)


def program_of(r: Resolved, comm=None) -> RankProgram | list[str]:
    """The per-rank program of resolved inputs: everything below reads the stack, the regime and the
    device's profile from ``r`` (and the program it returns), never looking them up again."""
    model, cluster, cfg = r.model, r.cluster, r.cfg
    reasons = layout_problems(cfg, cluster.devices_count, model) + execution_problems(
        model, cluster, cfg, r.regime.weight_bytes)
    if reasons:
        return reasons
    dp, _ = resolve_dp(cfg, cluster.devices_count)
    m = cfg.global_batch_size // dp // cfg.micro_batch_size
    lay = Layout(dp, cfg.tp, cfg.pp, cfg.cp, cfg.ep, cfg.virtual_stages, m, cfg.micro_batch_size)
    chunks = partition_blocks(model, cfg.pp * cfg.virtual_stages, cfg.first_stage_layers, cfg.last_stage_layers)
    if chunks is None:
        return [f"the model's {len(model.blocks)} blocks cannot fill pp × virtual_stages = "
                f"{cfg.pp * cfg.virtual_stages} pipeline chunks"]
    if comm is None:
        from simtrain.parallel.comm import comm_for
        comm = comm_for(cluster, lay, cfg, r.efficiency)
    coster = _OpCoster(cluster, r.regime, lay, cfg.sequence_parallel, model, cfg.moe_load_imbalance, cfg.stack,
                       r.efficiency)
    stages, same = [], {}
    idx = model_index(model)
    for s in range(cfg.pp):
        blocks = tuple(b for c in stage_chunks(s, cfg.pp, cfg.virtual_stages, cfg.pipeline_schedule) for b in chunks[c])
        key = idx.shape_key(blocks)
        if key in same:  # symmetric summary: a stage with the same ops costs the same
            stages.append(dataclasses.replace(same[key], stage=s, blocks=blocks))
        else:
            same[key] = stage_program(s, blocks, model, cluster, cfg, lay, comm, coster)
            stages.append(same[key])
    return RankProgram(lay, tuple(stages), r.regime, cfg, r.efficiency)


def estimate(model: Model | str, cluster: Cluster | str, cfg: TrainConfig | dict, *, comm=None) -> StepReport:
    """Closed-form step time, memory, MFU/HFU, bottleneck of ``model`` trained on ``cluster`` with ``cfg``.

    ``model`` and ``cluster`` may be library names or paths (a device name: one device), ``cfg`` a
    dict of TrainConfig fields; an argument of another type raises :class:`SimtrainError`."""
    model, cluster, cfg = as_model(model), as_cluster(cluster), as_config(cfg)
    try:
        r = resolve(model, cluster, cfg)
        program = program_of(r, comm)
    except (SpecError, SimtrainError) as err:
        return infeasible_report(model, cluster, cfg, [str(err)])
    if isinstance(program, list):
        return infeasible_report(r.model, r.cluster, r.cfg, program)
    return compose(r.model, r.cluster, r.cfg, program)


def compose(model: Model, cluster: Cluster, cfg: TrainConfig, program: RankProgram,
            engine: str = "estimate", finish_s: tuple[float, ...] | None = None, data=None) -> StepReport:
    """StepReport from a program; ``finish_s`` (when each pipeline rank ends its last backward) lets
    the simulator pass its own; the estimate evaluates the same schedule (parallel/schedule.py).
    ``data`` (busy seconds → PipelineTimes) lets the simulator pass its simulated input pipeline.

    Each rank's step: its overlapped parameter gathers, its pipeline work, then its exposed
    gradient sync and its optimizer step; the step ends with the last rank (whose numbers make the
    breakdown)."""
    lay, stages = program.layout, program.stages
    m = lay.micro_batches
    if finish_s is None:
        finish_s = schedule_finish_s(program, cfg.pipeline_schedule)
    waits = [_sync_wait_s(program.efficiency, lay, st) for st in stages]
    lines = [_realisation(program, st, f, cluster.node.devices_count) for st, f in zip(stages, finish_s, strict=True)]
    ends = [f + w + st.sync_after_s + st.optimizer_s + sum(x.values())
            for f, w, st, x in zip(finish_s, waits, stages, lines, strict=True)]
    last = max(range(len(stages)), key=ends.__getitem__)
    ender, slowest = stages[last], max(stages, key=lambda st: st.microbatch_s)
    busy_s = ends[last]
    data = (data or (lambda s: pipeline_times(cfg.data, cfg.global_batch_size / lay.dp, s, cluster.node)))(busy_s)
    hidden = paired_hidden_s(program, cfg.pipeline_schedule, last)
    breakdown = {**_breakdown(ender, m, finish_s[last], waits[last], hidden), "data_stall": data.stall_s,
                 **lines[last]}
    step_s = data.iteration_s
    memories = stage_memories(model, cluster, cfg, program)
    peak_mem = max(memories, key=lambda mm: (mm.reserved_bytes, mm.total_bytes))
    reasons = [] if peak_mem.fits else [peak_mem.overflow_reason()]
    finite = math.isfinite(step_s) and step_s > 0 and all(math.isfinite(v) for v in breakdown.values())
    if not finite:  # never "feasible" with a null step: a rate of 0, or one so small it underflows
        reasons.append(f"the step time is not a finite positive number ({step_s!r} s; breakdown "
                       f"{ {k: v for k, v in breakdown.items() if not math.isfinite(v)} or 'finite'}): a device "
                       "rate (peak FLOP/s, bandwidth) that is zero or underflows, or a cost that overflows")
    model_flops, hw_flops = _flops_per_step(model, cfg, program)
    from simtrain.cost.compute import matrix_peak_flops_per_s
    peak = matrix_peak_flops_per_s(cluster.device, program.regime.matmul_dtype)
    report = StepReport(
        model_name=model.name, cluster_name=cluster.name, devices_count=cluster.devices_count,
        feasible=peak_mem.fits and finite, reasons=tuple(reasons), step_time_s=step_s,
        global_batch_size=cfg.global_batch_size, tokens_per_sample=model.tokens_per_sample,
        model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops, peak_flops_per_s=peak,
        vector_flops_per_step=_vector_flops_per_sample(model) * cfg.global_batch_size, time_breakdown_s=breakdown, memory=peak_mem, bottleneck="", bottleneck_reason="",
        top_ops=top_ops(slowest, m), comm=comm_reports(stages, m), layout=lay.as_dict(),
        device_name=cluster.device.name,
        price_per_device_hour=_value(cluster.device.price_per_hour), tdp_w=full_load_watts(cluster.device),
        idle_power_w=_value(cluster.device.idle_power_w),
        eval_time_per_step_s=_eval_per_step(cfg, slowest, lay), attention_flops=cfg.attention_flops, engine=engine,
        stack=program.cfg.stack.name, sync_wait_s=waits[last], compute_by_class_s=compute_by_class(ender, m))
    name, why = bottleneck_of(report, ender, data)
    object.__setattr__(report, "bottleneck", name)
    object.__setattr__(report, "bottleneck_reason", why)
    from simtrain.report.sanity import accelerator_notes, model_class_of, sanity_warnings
    emulated = emulation_warning(cluster.device, program.regime.matmul_dtype)
    object.__setattr__(report, "warnings", sanity_warnings(
        report, device_kind=cluster.device.kind, model_class=model_class_of(model),
        matmul_dtype=str(program.regime.matmul_dtype)) + ((emulated,) if emulated else ())
        + accelerator_notes(report, cluster.device, model, program.regime.weight_bytes))
    return report


def schedule_finish_s(program: RankProgram, schedule) -> tuple[float, ...]:
    """When each pipeline rank ends its last task: the schedule's exact evaluation over the stages'
    task seconds (``StageProgram.task_seconds``), each rank starting after its exposed sync."""
    lay, stages, v = program.layout, program.stages, program.layout.v
    other = None
    if schedule in SPLIT_BACKWARD:  # the other task kinds only where the schedule runs them
        tasks = [st.task_seconds(v) for st in stages]
        other = {k: [t[k] for t in tasks] for k in ("I", "W", "Fo", "Bo")}
    return pipeline_finish_s([st.forward_s / v for st in stages], [st.backward_s / v for st in stages],
                             lay.micro_batches, schedule, v, [st.sync_before_s for st in stages], other)


def paired_hidden_s(program: RankProgram, schedule, rank: int) -> float:
    """Seconds of exposed communication rank ``rank``'s overlapped forward / backward pairs hide
    (DualPipe: F + B − the pair), which the breakdown takes off ``comm_exposed``."""
    if schedule not in SPLIT_BACKWARD or program.layout.pp == 1:
        return 0.0
    lay = program.layout
    t = program.stages[rank].task_seconds(lay.v)
    pairs = sum(kind == "Bo" for kind, _, _ in rank_order(rank, lay.pp, lay.micro_batches, schedule, lay.v))
    return pairs * (t["F"] + t["B"] - t["Fo"] - t["Bo"])


def _sync_wait_s(eff, lay: Layout, stage) -> float:
    """The stage's expected wait for the slowest of the job's ranks at its gradient sync: its own
    forward + backward (+ recompute) work scaled by the device's measured jitter
    (``Efficiency.rank_jitter_sigma``; cost/variability.py). Every rank of a synchronous step is tied
    to every other through the collectives, so N is the whole job (dp · tp · pp · cp)."""
    from simtrain.cost.variability import sync_wait_seconds
    sigma = eff.rank_jitter_sigma
    work_s = lay.micro_batches * (stage.fw_s + stage.bw_s + stage.recompute_s)
    return sync_wait_seconds(work_s, lay.dp * lay.tp * lay.pp * lay.cp, sigma)


def _breakdown(ender, m: int, finish_s: float, wait_s: float, paired_s: float = 0.0) -> dict:
    """The critical rank's step by part (data stall and realisation lines apart): the compute beside
    its overlapped collectives loses ``interference`` seconds, which ``CommTask.exposed_s`` charges,
    so that part leaves ``comm_exposed`` for its own line; ``paired_s``: what overlapped forward /
    backward pairs hid of it (:func:`paired_hidden_s`)."""
    interference = interference_s(ender, m)
    return {"compute": m * (ender.fw_s + ender.bw_s), "recompute": m * ender.recompute_s,
            "comm_exposed": m * ender.exposed_comm_s() + ender.sync_before_s + ender.sync_after_s + wait_s
            - interference - paired_s,
            "pipeline_bubble": max(0.0, finish_s - (ender.sync_before_s + m * ender.microbatch_s - paired_s)),
            "optimizer": ender.optimizer_s, "interference": interference}


def _realisation(program: RankProgram, stage, span_s: float, devices_per_node: int) -> dict:
    """The stack's realisation lines of one pipeline rank (cost/realisation.py): idle gaps, host gaps
    and the wait for stragglers among the job's ranks and hosts."""
    lay = program.layout
    ranks = lay.dp * lay.tp * lay.pp * lay.cp
    return realisation_lines(program.cfg.stack, stage, lay.micro_batches, span_s, ranks,
                             program.efficiency.rank_jitter_sigma, hosts_of(ranks, devices_per_node))


def _value(sourced):
    return None if sourced is None else sourced.value


def _flops_per_step(model: Model, cfg: TrainConfig, program: RankProgram) -> tuple[float, float]:
    """Model FLOPs (fw + bw of the matrix ops, FMA = 2; attention per cfg.attention_flops) and hardware
    FLOPs (+ recompute, as the per-rank program counts it)."""
    model_flops = _model_flops_per_sample(model, cfg.attention_flops) * cfg.global_batch_size
    lay = program.layout
    ranks_per_stage = lay.dp * lay.tp * lay.cp
    recompute = sum(st.recompute_flops for st in program.stages) * lay.micro_batches * ranks_per_stage
    return model_flops, model_flops + recompute


def _model_flops_per_sample(model: Model, convention: str) -> float:
    """fw + bw FLOPs of one sample of the matrix ops only (linear / matmul, conv, attention, MoE
    experts): the model-FLOPs convention of PaLM (Chowdhery et al. 2022, App. B: 6N + 12·L·H·Q·T),
    Megatron-LM (Narayanan et al. 2021, eq. 3) and torch's FlopCounterMode (which registers only
    mm / addmm / bmm / convolution / SDPA formulas). Vector-op FLOPs (norms, activations, softmax,
    adds) still take time in the cost layer; they are reported apart, :func:`_vector_flops_per_sample`.
    'causal' halves causal attention (cached per model)."""
    key = f"_matrix_flops_{convention}"
    if key not in model.meta:
        model.meta[key] = sum(_op_flops(op, convention) for op in model.ops if op.op_class in MATRIX_CLASSES)
    return model.meta[key]


def _vector_flops_per_sample(model: Model) -> float:
    """fw + bw FLOPs of one sample of every non-matrix op (the figure model FLOPs leave out)."""
    key = "_vector_flops"
    if key not in model.meta:
        model.meta[key] = sum(op.flops.total for op in model.ops if op.op_class not in MATRIX_CLASSES)
    return model.meta[key]


def _op_flops(op, convention: str) -> float:
    causal = convention == "causal" and op.attention is not None and op.attention.causal
    return op.flops.total * (0.5 if causal else 1.0)


def _eval_per_step(cfg: TrainConfig, crit, lay: Layout) -> float:
    """Forward-only evaluation, amortised over the training steps between evaluations."""
    if cfg.eval is None:
        return 0.0
    samples = cfg.eval.batch_size or cfg.global_batch_size
    per_rank_microbatches = samples / lay.dp / lay.micro_batch
    eval_s = cfg.eval.batches * per_rank_microbatches * (crit.fw_s + crit.exposed_comm_s("fw"))
    if lay.pp > 1:
        eval_s += (lay.pp - 1) * crit.fw_s * cfg.eval.batches  # fill / drain of a forward-only pipeline
    return eval_s / cfg.eval.every_steps
