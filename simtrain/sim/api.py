"""``st.simulate``: the discrete-event path → StepReport (+ ``report.timeline``), same fields as estimate."""

from __future__ import annotations

import math

from simtrain.sim.engine import SimOptions, SimResult, run_program

__all__ = ["simulate", "link_tiers", "chunk_ops"]

_GRANULARITIES = ("chunk", "layer", "op")


def link_tiers(cluster, layout, rank_order) -> tuple[tuple[str, str], ...]:
    """The physical link each axis's traffic leaves a rank on: "fabric" when the axis's group
    (rank 0's, parallel/topology.py) stays inside one node, else "network" (the rank's NIC); pipeline
    sends per ``pipeline_send_tier``; weight streaming on its own external link."""
    from simtrain.parallel.topology import group_placement, pipeline_send_tier
    out = [("stream", "external")]
    for axis in ("tp", "cp", "ep", "dp"):
        if getattr(layout, axis) > 1:
            spanned = group_placement(cluster, layout, axis, rank_order).nodes_spanned
            out.append((axis, "network" if spanned > 1 else "fabric"))
    if layout.pp > 1:
        out.append(("pp", pipeline_send_tier(cluster, layout, rank_order)))
    return tuple(out)


#: the most pipeline tasks (micro-batches × stages × chunks × 2 phases × steps) one simulation schedules:
#: the event queue and the timeline grow with them; above, the closed form gives the same step
MAX_SIM_TASKS = 2_000_000


def _check_arguments(granularity: str, steps, contention=False, trace=True) -> None:
    """Arguments that are wrong whatever the job (raised, as a wrong ``cfg`` type is)."""
    from simtrain.errors import SpecError
    if granularity not in _GRANULARITIES:
        raise SpecError.one(None, "granularity", f"must be one of {', '.join(_GRANULARITIES)}, got {granularity!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 10_000:
        raise SpecError.one(None, "steps", f"must be a whole number from 1 to 10,000, got {steps!r}")
    for name, value in (("contention", contention), ("trace", trace)):
        if not isinstance(value, bool):  # "no" is truthy: never read a switch from a string
            raise SpecError.one(None, name, f"must be True or False, got {value!r}")


def _check_size(program, steps: int) -> None:
    from simtrain.errors import SpecError
    lay = program.layout
    tasks = lay.micro_batches * lay.pp * lay.v * 2 * steps
    if tasks > MAX_SIM_TASKS:
        raise SpecError.one(None, "global_batch_size", f"the simulator would schedule {tasks:,} pipeline tasks "
                            f"({lay.micro_batches:,} micro-batches × {lay.pp} stages × {lay.v} chunks × 2 × {steps} "
                            f"step(s)), more than {MAX_SIM_TASKS:,}: use st.estimate (the same step without "
                            "contention) or a larger micro_batch_size")


def chunk_ops(r, program) -> tuple:
    """Per global model chunk (the partition the program was built on), its ops in execution order
    as (name, forward s, backward + recomputation s) per micro-batch on one rank: the cost layer's
    seconds for each op (parallel/program.py ``_OpCoster``, the recomputation share of
    ``stage_compute``), for ``granularity="op"``."""
    from simtrain.glossary import PipelineSchedule
    from simtrain.parallel.model_index import REPEATED_BLOCK
    from simtrain.parallel.partition import partition_blocks
    from simtrain.parallel.program import _OpCoster, _recompute_share
    from simtrain.parallel.recompute import early_stop_skips, recomputed_blocks
    from simtrain.parallel.schedule import chunk_rank
    model, cfg, lay = r.model, r.cfg, program.layout
    coster = _OpCoster(r.cluster, r.regime, lay, cfg.sequence_parallel, model, cfg.moe_load_imbalance, r.stack,
                       r.efficiency)
    skip = early_stop_skips(cfg, model)
    # full recomputation of only some layers (recompute_num_layers) re-runs the first N of each stage
    full = str(cfg.recompute) == "full"
    dropped = [recomputed_blocks(st.blocks, cfg) for st in program.stages] if full else None
    out = []
    sched = PipelineSchedule(cfg.pipeline_schedule)
    chunks = partition_blocks(model, lay.pp * lay.v, cfg.first_stage_layers, cfg.last_stage_layers)
    for chunk, blocks in enumerate(chunks):
        ops = []
        for b in blocks:
            repeated = bool(REPEATED_BLOCK.match(b)) and (not full or b in dropped[chunk_rank(chunk, lay.pp, sched)])
            for op in model.block_ops(b):
                c = coster(op)
                share = 0.0 if op.name in skip else _recompute_share(op, cfg, repeated, model)
                ops.append((op.name, c.fw_s, c.bw_s + share * c.fw_s))
        out.append(tuple(ops))
    return tuple(out)


def _options(cluster, cfg, program, granularity: str, contention: bool, speed, trace: bool,
             ops: tuple = ()) -> SimOptions:
    """The engine's options; a speed tuple that does not fit the layout makes the report infeasible."""
    from simtrain.errors import SpecError
    if speed is not None:
        speed = tuple(float(x) for x in speed)
        if len(speed) != program.layout.pp or not all(0 < x < float("inf") for x in speed):
            raise SpecError.one(None, "speed", f"needs {program.layout.pp} positive finite factors (one per "
                                               f"pipeline rank), got {speed!r}")
    tiers = link_tiers(cluster, program.layout, cfg.rank_order) if contention else ()
    return SimOptions(granularity, contention, speed, trace, tiers, float(cfg.dp_bucket_bytes), ops)


def _eval_plan(cfg, layout, steps: int) -> tuple[int | None, int]:
    """(every N steps, micro-batches per replica of one evaluation) when the run reaches an evaluation."""
    if cfg.eval is None or steps < cfg.eval.every_steps:
        return None, 0
    samples = cfg.eval.batch_size or cfg.global_batch_size
    per_batch = max(1, math.ceil(samples / layout.dp / layout.micro_batch))
    return cfg.eval.every_steps, per_batch * cfg.eval.batches


def simulate(model, cluster, cfg, *, granularity: str = "chunk", contention: bool = False, speed=None,
             trace: bool = True, steps: int = 1):
    """DES → StepReport with the same fields as st.estimate, plus ``report.timeline`` (and
    ``report.data_loader``, the input pipeline's simulated run). Inputs as st.estimate takes them
    (objects, library names or paths, a dict of TrainConfig fields).

    ``granularity`` "chunk" (a task's compute is one slice), "layer" or "op" (one slice per op of the
    chunk, named as the model's ops: ``StepReport.top_ops`` groups them); ``contention`` True makes
    collectives that meet on one physical link share it (False: each rank's each axis has its own
    link, the closed form's assumption, and the step equals ``st.estimate``'s); ``speed``: one
    compute speed factor per pipeline rank (1 nominal); ``trace`` False skips recording the events;
    ``steps``: steps simulated back to back (the report's step is the first; with an EvalConfig and
    at least ``every_steps`` steps the evaluations run too, and ``eval_time_per_step_s`` is theirs)."""
    from simtrain.errors import SimtrainError, SpecError
    from simtrain.estimator import infeasible_report, program_of
    from simtrain.inputs import as_cluster, as_config, as_model
    from simtrain.parallel.memory_plan import stage_memories
    from simtrain.resolve import resolve
    model, cluster, cfg = as_model(model), as_cluster(cluster), as_config(cfg)
    _check_arguments(granularity, steps, contention, trace)
    try:
        r = resolve(model, cluster, cfg)
        model, cluster, cfg = r.model, r.cluster, r.cfg
        program = program_of(r)
        if isinstance(program, list):
            return infeasible_report(model, cluster, cfg, program, engine="simulate")
        _check_size(program, steps)
        ops = chunk_ops(r, program) if granularity == "op" else ()
        opts = _options(cluster, cfg, program, granularity, contention, speed, trace, ops)
        every, eval_mbs = _eval_plan(cfg, program.layout, steps)
        memories = stage_memories(model, cluster, cfg, program)
        result = run_program(program, cfg.pipeline_schedule, opts, memories, steps=steps, eval_every=every,
                             eval_micro_batches=eval_mbs)
    except (SpecError, SimtrainError) as err:
        return infeasible_report(model, cluster, cfg, [str(err)], engine="simulate")
    return _report(model, cluster, cfg, program, result, steps, opts.speed or ())


def _report(model, cluster, cfg, program, result: SimResult, steps: int, speeds: tuple[float, ...] = ()):
    """The StepReport of the run: the estimate's composition over the simulated finish times and
    the simulated input pipeline, with the timeline, the loader's run and each step's seconds."""
    from simtrain.estimator import compose
    from simtrain.sim.dataloader import simulate_data_loader
    loader = []

    def data(busy_s: float):
        run = simulate_data_loader(cfg.data, cfg.global_batch_size / program.layout.dp, busy_s, cluster.node)
        loader.append(run)
        return run.times
    finish = result.finish_s
    if result.timeline.link_max_concurrent or any(x != 1.0 for x in speeds):
        # compose adds each rank's nominal exposed sync and optimizer to its finish; where links were
        # shared or ranks slowed, those ran longer in the run: hand it the finish that ends the rank
        # when the run ended it (the difference shows in the pipeline-bubble term)
        finish = tuple(e - st.sync_after_s - st.optimizer_s for e, st in zip(result.end_s, program.stages, strict=True))
    report = compose(model, cluster, cfg, program, engine="simulate", finish_s=finish, data=data)
    object.__setattr__(report, "timeline", result.timeline)
    object.__setattr__(report, "data_loader", loader[0] if loader else None)
    # the realisation lines (idle and host gaps, stragglers: cost/realisation.py) are charged per step,
    # not drawn as slices: each simulated step carries them as the composed step does
    from simtrain.cost.realisation import STEP_LINES
    extra = sum(report.time_breakdown_s.get(k, 0.0) for k in STEP_LINES)
    object.__setattr__(report, "steps_s", tuple(s + extra for s in result.steps_s))
    if result.evals_s:
        object.__setattr__(report, "eval_time_per_step_s", sum(result.evals_s) / steps)
    return report
