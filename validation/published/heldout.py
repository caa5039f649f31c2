"""HELD-OUT test: public end-to-end throughput of whole training runs, predicted zero-shot.

    python -m validation.published.heldout

Every row below is a published run (paper table, repository README or benchmark page) beyond the
calibration set (Narayanan et al. 2021 Table 1, Korthikanti et al. 2022 Table 5). Each is predicted
with the shipped device profiles and the stack preset of the framework that produced it: nothing is
fitted to these rows and no knob is tuned to them. They must never become tuning targets; the CI test
(tests/golden/test_heldout.py) checks only that the table is well-formed and that every row estimates.

A row keeps the settings its source states; a setting the source leaves out takes the framework's
documented default and is listed in ``assumptions``. The published metric is converted to a step time
with the source's own definition (``definition``): tokens/s/GPU → global_batch·seq / (value · GPUs);
s/iter as printed; TFLOP/s/GPU → FLOPs per step / (value · GPUs) with the FLOP convention named there.
docs/heldout.md has the table, the assumptions and the results as run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

import simtrain as st
from simtrain.cost.realisation import STEP_LINES
from validation.published.heldout_rows import HELDOUT_RUNS, HeldoutRun

__all__ = ["HeldoutRun", "HeldoutResult", "HELDOUT_RUNS", "METRICS", "published_step_time_s", "metric_of_step",
           "breakdown_shares",
           "config_of", "cluster_of", "estimate_row", "run_heldout", "mape_by_stack", "main"]

METRICS = ("tokens/s/GPU", "TFLOP/s/GPU", "s/iter")


def _gpus(run: HeldoutRun) -> int:
    return run.nodes * cluster_of(run).node.devices_count


def _palm_flops_per_token(model: st.Model, seq: int) -> float:
    """6·N + 12·L·H·Q·T (Chowdhery et al. 2022 App. B), N the model's parameters."""
    meta = model.meta
    return 6.0 * model.param_count + 12.0 * meta["layers"] * meta["heads"] * meta["head_dim"] * seq


def _flops_per_step(run: HeldoutRun, model: st.Model) -> float:
    return run.global_batch_size * run.seq_len * _palm_flops_per_token(model, run.seq_len)


def published_step_time_s(run: HeldoutRun, model: st.Model | None = None) -> float:
    """The published metric as seconds per step, by the row's ``definition``."""
    tokens = run.global_batch_size * run.seq_len
    if run.metric == "tokens/s/GPU":
        return tokens / (run.published * _gpus(run))
    if run.metric == "s/iter":
        return run.published
    if run.metric == "TFLOP/s/GPU":
        model = model or st.load_model(run.model)
        return _flops_per_step(run, model) / (run.published * 1e12 * _gpus(run))
    raise ValueError(f"{run.name}: unknown metric {run.metric!r}")


def metric_of_step(run: HeldoutRun, step_s: float, model: st.Model | None = None) -> float:
    """A step time in the row's published unit (the inverse of :func:`published_step_time_s`)."""
    return published_step_time_s(run, model) * run.published / step_s if run.metric != "s/iter" else step_s


def cluster_of(run: HeldoutRun):
    cluster = st.load_cluster(run.cluster, nodes=run.nodes)
    update = {}
    if run.nics_per_node is not None:
        update["nics_per_node"] = run.nics_per_node
    if run.nic_link is not None:
        update["nic_link"] = st.load_link(run.nic_link)
    if not update:
        return cluster
    return cluster.model_copy(update={"network": cluster.network.model_copy(update=update)})


def stack_of_run(run, **knobs):
    """The row's stack (a HeldoutRun, or any row with ``stack`` and ``stack_knobs``): its preset name,
    or the preset with the knobs its configuration sets (and ``knobs``, which win) applied. A row of a
    framework the preset only stands for (``framework`` set) runs the preset's kernels with the
    cross-stack prior's realisation (``Stack.with_prior_realisation``): the preset's fitted knobs
    measure its own framework, not this one."""
    other = getattr(run, "framework", None) is not None
    if not run.stack_knobs and not knobs and not other:
        return run.stack
    stack = st.load_stack(run.stack)
    if other:
        stack = stack.with_prior_realisation()
    return stack.with_overrides(**{**dict(run.stack_knobs), **knobs})


_OPTIONAL = ("zero_stage", "recompute_every_k_blocks", "recompute_num_layers", "flash_attention", "dp_overlap",
             "optimizer_impl", "rank_order")


def config_of(run: HeldoutRun) -> st.TrainConfig:
    """The row as a TrainConfig; knobs the row leaves None stay the stack preset's."""
    fields = dict(global_batch_size=run.global_batch_size, micro_batch_size=run.micro_batch_size,
                  seq_len=run.seq_len, precision=run.precision, optimizer="adamw", tp=run.tp, pp=run.pp,
                  cp=run.cp, sequence_parallel=run.sequence_parallel, recompute=run.recompute,
                  pipeline_schedule=run.pipeline_schedule, virtual_stages=run.virtual_stages, stack=stack_of_run(run))
    fields.update({k: getattr(run, k) for k in _OPTIONAL if getattr(run, k) is not None})
    return st.TrainConfig(**fields)


@dataclass(frozen=True)
class HeldoutResult:
    run: HeldoutRun
    published_step_s: float
    predicted_step_s: float
    published_metric: float
    predicted_metric: float
    feasible: bool
    reasons: tuple[str, ...]
    memory_gib: dict
    """Peak device: params, grads, optimizer, activations, buffers, total and capacity (GiB)."""
    warnings: tuple[str, ...]
    mfu: float
    hfu: float
    time_breakdown_s: dict
    compute_by_class_s: dict = dataclasses.field(default_factory=dict)

    @property
    def error(self) -> float:
        """Relative step-time error, predicted / published − 1 (positive: predicted slower)."""
        return self.predicted_step_s / self.published_step_s - 1.0


def _memory_gib(mem) -> dict:
    keys = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes",
            "total_bytes", "capacity_bytes")
    return {k.removesuffix("_bytes"): getattr(mem, k) / 2**30 for k in keys}


def estimate_row(run: HeldoutRun) -> HeldoutResult:
    model = st.load_model(run.model)
    r = st.estimate(model, cluster_of(run), config_of(run))
    published = published_step_time_s(run, model)
    return HeldoutResult(run=run, published_step_s=published, predicted_step_s=r.step_time_s,
                         published_metric=run.published, predicted_metric=metric_of_step(run, r.step_time_s, model),
                         feasible=bool(r.feasible), reasons=tuple(r.reasons), memory_gib=_memory_gib(r.memory),
                         warnings=tuple(r.warnings), mfu=r.mfu, hfu=r.hfu, time_breakdown_s=dict(r.time_breakdown_s),
                         compute_by_class_s=dict(r.compute_by_class_s))


def run_heldout(runs=HELDOUT_RUNS) -> list[HeldoutResult]:
    """Every held-out row predicted zero-shot (shipped profiles, the row's stack preset)."""
    return [estimate_row(run) for run in runs]


def mape_by_stack(results: list[HeldoutResult], feasible_only: bool = False) -> dict[str, float]:
    """MAPE of the step time per stack preset and ``overall`` (fractions)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for res in results:
        if (res.feasible or not feasible_only) and math.isfinite(res.error):
            groups[res.run.stack].append(abs(res.error))
            groups["overall"].append(abs(res.error))
    order = sorted(k for k in groups if k != "overall") + ["overall"]
    return {k: statistics.mean(groups[k]) for k in order if groups[k]}


def _record(res: HeldoutResult) -> st.RunRecord:
    run = res.run
    return st.RunRecord(model=st.load_model(run.model), cluster=cluster_of(run), config=config_of(run),
                        step_time_s=res.published_step_s, name=run.name)


def _family(run: HeldoutRun) -> str:
    return cluster_of(run).device.name.split("-")[0]


def framework_of(run: HeldoutRun) -> str:
    """The framework that produced the run: its own where the preset only stands for it."""
    return run.framework or run.stack


def one_shot_groups(results: list[HeldoutResult], by: str = "stack") -> dict[str, list[tuple[str, float, list[float]]]]:
    """The calibrate-on-your-own-run workflow, evaluated: within each (stack, GPU family) — or, with
    ``by="framework"``, each (framework that produced the run, GPU family) — with two or more rows with
    a predicted step time (those predicted not to fit in memory too: they ran),
    ``st.calibrate_runs`` on each row alone (one factor), the other
    rows of the group predicted. {group: [(trained on, factor, errors of the others)]}. Nothing
    learned here is kept anywhere: each fit is thrown away after predicting its group."""
    if by not in ("stack", "framework"):
        raise ValueError(f"by must be 'stack' or 'framework', got {by!r}")
    groups: dict[str, list[HeldoutResult]] = defaultdict(list)
    for res in results:  # a run predicted not to fit in memory ran all the same: calibrate_runs takes it
        if math.isfinite(res.predicted_step_s):
            key = res.run.stack if by == "stack" else framework_of(res.run)
            groups[f"{key} on {_family(res.run)}"].append(res)
    out = {}
    for name, rows in sorted(groups.items()):
        if len(rows) < 2:
            continue
        records = [_record(r) for r in rows]
        entries = []
        for i, rec in enumerate(records):
            cal = st.calibrate_runs([rec])
            errs = [st.estimate(o.model, cal.apply(o.cluster), o.config).step_time_s / o.step_time_s - 1.0
                    for j, o in enumerate(records) if j != i]
            entries.append((rec.name, cal.factors.get("compute", 1.0), errs))
        out[name] = entries
    return out


def _row_line(res: HeldoutResult) -> str:
    feas = "yes" if res.feasible else "NO"
    return (f"{res.run.name:<36} {res.run.stack:<13} {res.run.metric:<13} {res.published_metric:>9.2f} "
            f"{res.predicted_metric:>9.2f} {res.published_step_s:>9.3f} {res.predicted_step_s:>9.3f} "
            f"{100 * res.error:>+7.1f}% {100 * res.mfu:>5.1f}% {feas:>4}")


_PARTS = (("matmul", None), ("attention", None), ("other compute", None), ("exposed comm", "comm_exposed"),
          ("interference", "interference"), ("realisation", None), ("bubble", "pipeline_bubble"),
          ("optimizer", "optimizer"))


def breakdown_shares(res: HeldoutResult) -> dict[str, float]:
    """Where the predicted step goes, as shares of it: compute by op class (matmul, attention, the rest,
    recomputation included), exposed communication, interference, realisation (idle gaps, host gaps,
    stragglers), pipeline bubble and optimizer."""
    b, by_class, step = res.time_breakdown_s, res.compute_by_class_s, res.predicted_step_s
    compute = b.get("compute", 0.0) + b.get("recompute", 0.0)
    parts = {"matmul": by_class.get("matmul", 0.0), "attention": by_class.get("attention", 0.0)}
    parts["other compute"] = max(0.0, compute - parts["matmul"] - parts["attention"])
    parts["realisation"] = sum(b.get(k, 0.0) for k in STEP_LINES)
    for name, key in _PARTS:
        if key is not None:
            parts[name] = b.get(key, 0.0)
    return {name: parts[name] / step for name, _ in _PARTS} if step > 0 else {}


def _breakdown_line(res: HeldoutResult) -> str:
    cells = "  ".join(f"{name} {100 * v:4.1f}%" for name, v in breakdown_shares(res).items())
    return f"{res.run.name[:36]:<36} {100 * res.error:+6.1f}%  {cells}"


def main() -> None:
    results = run_heldout()
    print(f"{'run':<36} {'stack':<13} {'metric':<13} {'published':>9} {'predicted':>9} {'pub s':>9} "
          f"{'pred s':>9} {'error':>8} {'p.MFU':>6} {'fits':>4}")
    for res in results:
        print(_row_line(res))
    print("\npredicted step, where it goes (shares of the predicted step):")
    for res in results:
        print(_breakdown_line(res))
    for res in results:
        if not res.feasible:
            mem = ", ".join(f"{k} {v:.1f}" for k, v in res.memory_gib.items())
            print(f"\n{res.run.name}: predicted infeasible: {'; '.join(res.reasons)}\n  peak device GiB: {mem}")
    flagged = [res for res in results if res.warnings]
    for res in flagged:
        print(f"\n{res.run.name}: warnings: {' | '.join(res.warnings)}")
    print("\nstep-time MAPE (all rows, infeasible ones at their predicted time):")
    for name, value in mape_by_stack(results).items():
        print(f"  {name:<14} {100 * value:6.1f}%")
    feasible = mape_by_stack(results, feasible_only=True)
    if feasible:
        print(f"feasible rows only: overall {100 * feasible['overall']:.1f}% "
              f"({sum(r.feasible for r in results)}/{len(results)} rows)")
    print("\none-shot within a stack and GPU family (calibrate on one row, predict the others):")
    _print_one_shot(one_shot_groups(results))
    print("\nthe same within the framework that produced the rows (Meta's stack and fms-fsdp apart from the "
          "presets standing for them):")
    _print_one_shot(one_shot_groups(results, by="framework"))


def _print_one_shot(groups: dict) -> None:
    for group, entries in groups.items():
        errs = [abs(e) for _, _, es in entries for e in es]
        print(f"  {group:<26} rows {len(entries)}  factor {min(f for _, f, _ in entries):.2f}-"
              f"{max(f for _, f, _ in entries):.2f}  MAPE {100 * statistics.mean(errs):.1f}%  "
              f"worst {100 * max(errs):.1f}%")


if __name__ == "__main__":
    main()
