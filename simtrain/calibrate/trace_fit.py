"""A profiler trace against simtrain's prediction: per-class factors (``st.calibrate_classes``) and op by op
(``st.compare_ops``).

Per-class factors
-----------------

Per-class factors from a profiler trace: ``calibrate_classes(trace, model, cluster, cfg)`` → ``st.Calibration``.

    cal = calibrate_classes("a.trace.json", model_a, "host-cpu", cfg_a)      # fit on model A's trace
    st.estimate(model_b, cal.apply(cluster), cfg_b)                          # predict model B

Measured: seconds per step of each op class and of the optimizer, read from the trace
(:mod:`simtrain.calibrate.trace`). Predicted: the same groups from the estimator's own per-op costs
(:func:`predicted_groups`: ``stage_compute`` of the ops of one class, the stage's optimizer step),
so the fit sees exactly the numbers ``st.estimate`` adds up.

Fit: bounded least squares on ``log(predicted_g / measured_g)`` over the groups g that hold at least
:data:`MIN_SHARE` of the trace's attributed time, through the estimator (clips, launch overheads and
memory-bound legs stay in the loop), with one factor per group — ``class:<c>`` scales class c's
compute ceiling; the optimizer and every memory-bound leg move with the shared ``memory`` factor —
and a weak ridge (:data:`RIDGE`) toward 1 on the log-factors, so a factor the trace cannot pin
(two groups leaning on ``memory``) stays near 1 rather than wandering. A factor that moves no
group by ≥ 1 % at either of its bounds is not fitted; classes with too little time keep 1.

Uncertainty: the Gauss-Newton standard error with the residual scale set by the trace's own
step-to-step spread of the groups (never below ``RUN_NOISE``).

Op by op
--------

Op by op: a profiler trace's forward calls, each with its backward, against simtrain's per-op costs.

    rows = st.compare_ops("a.trace.json", model, "host-cpu", cfg, untraced_step_s=0.021)
    print(ops_table(rows))          # the largest disagreements first

Where :func:`simtrain.calibrate.trace_fit.calibrate_classes` sums a trace into op classes, this keeps
each call: the trace's calls (:attr:`~simtrain.calibrate.trace.TraceTimes.calls`: an outermost ATen
op and the backward nodes autograd made of it, matched by sequence number) are paired with the model's
ops of the same class in execution order — the k-th conv of the trace with the k-th conv of the
model — and each pair shows measured and predicted seconds per step, forward and backward. A class
whose counts differ (a view the importer folds into its neighbour, an op the trace records that the
model prices as free) leaves its extra calls or ops unpaired, shown with one side empty.

Predicted: the estimator's own per-op costs (``op_cost`` through the stage's coster), times the
micro-batches of one step, one pipeline stage (``pp`` must be 1, as for a per-class fit), without
activation recomputation (a checkpointed run's trace puts it in its own nodes). Measured:
the trace's per-step medians, less the profiler's own cost when ``untraced_step_s`` is given
(:func:`~simtrain.calibrate.trace_fit.without_profiler_overhead`, per unit as there).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from simtrain.calibrate.runs import BOUNDS, class_factor, scaled_cluster
from simtrain.calibrate.trace import OPTIMIZER, TraceTimes, read_profiler_trace
from simtrain.errors import SimtrainError, SpecError
from simtrain.glossary import OpClass

__all__ = ["predicted_groups", "calibrate_classes", "MIN_SHARE", "RIDGE", "group_factor",
           "without_profiler_overhead", "stage_setup", "load_times", "OpComparison", "compare_ops",
           "predicted_ops", "pair_calls", "ops_table"]


# ──── Per-class factors ─────────────────────────────────────────────────────────────────────────────

MIN_SHARE = 0.03
"""A group needs this share of the trace's attributed time to be fitted (below it the trace's
timer resolution and the ops' launch cost dominate: the factor stays 1)."""
RIDGE = 0.05
"""Weight of the pull of each log-factor toward 0 (factor 1), against residuals in log units."""
_SENSITIVITY_MIN = 0.01
_BISECT_STEPS = 14
"""Bisection steps of the starting point (the log-range of a factor / 2^14: well under 0.1 %)."""


def group_factor(group: str) -> str:
    """The factor a measured group calibrates: ``memory`` for the optimizer, ``class:<c>`` for a class."""
    return "memory" if group == OPTIMIZER else class_factor(group)


def stage_setup(model, cluster, cfg):
    """(prepared model, its program, the stage's op coster, its model-index items) of the traced run:
    one process (``pp`` = 1), as :func:`predicted_groups` and the per-op comparison price it."""
    from simtrain.estimator import program_of
    from simtrain.parallel.model_index import model_index
    from simtrain.parallel.program import _OpCoster
    from simtrain.resolve import resolve
    r = resolve(model, cluster, cfg)
    model, cluster, cfg = r.model, r.cluster, r.cfg
    if cfg.pp != 1:
        raise SpecError.one(None, "config.pp", "a profiler trace is one process: calibrate with pp = 1")
    program = program_of(r)
    if isinstance(program, list):
        raise SpecError.one(None, "config", "the traced run is predicted infeasible: " + "; ".join(program)[:300])
    coster = _OpCoster(cluster, program.regime, program.layout, cfg.sequence_parallel, model, cfg.moe_load_imbalance,
                       r.stack, r.efficiency)
    return model, program, coster, model_index(model).items(program.stages[0].blocks)


def predicted_groups(model, cluster, cfg) -> dict[str, float]:
    """Predicted seconds per step of each op class and of the optimizer (one pipeline stage), and
    ``other``: the rest of the estimated step (exposed communication, data stall, host-bound waits)."""
    from simtrain.estimator import estimate
    from simtrain.parallel.program import stage_compute
    _, program, coster, items = stage_setup(model, cluster, cfg)
    cfg = program.cfg  # resolved once in stage_setup: stage_compute reads its stack knobs
    lay, stage = program.layout, program.stages[0]
    out: dict[str, float] = {}
    for cls in OpClass:
        mine = [it for it in items if it[0].op_class is cls]
        if mine:
            fw, bw, rc = stage_compute(mine, cfg, coster)[:3]
            out[cls.value] = lay.micro_batches * (fw + bw + rc)
    out[OPTIMIZER] = stage.optimizer_s
    step = estimate(model, cluster, cfg).step_time_s
    out["other"] = max(0.0, step - sum(out.values()))
    return out


def _log_errors(model, cluster, cfg, groups, names, theta, measured) -> np.ndarray:
    factors = dict(zip(names, np.exp(theta), strict=True))
    pred = predicted_groups(model, scaled_cluster(cluster, factors) if factors else cluster, cfg)
    res = [math.log(max(pred.get(g, 0.0), 1e-15) / measured[g]) for g in groups]
    return np.array(res + list(RIDGE * np.asarray(theta)))


def _fittable(times: TraceTimes, predicted: dict[str, float]) -> list[str]:
    """Groups with enough measured time that the model also predicts (optimizer and classes)."""
    total = times.attributed_s or 1.0
    return [g for g, s in times.seconds.items()
            if s >= MIN_SHARE * total and predicted.get(g, 0.0) > 0 and (g == OPTIMIZER or g in OpClass._value2member_map_)]


def _sensitive(model, cluster, cfg, groups, candidates, measured) -> list[str]:
    """The candidates that move some group by ≥ 1 % at either bound: a memory-bound class does not
    speed up with its compute ceiling, but a slow kernel (CPU max-pool backward) is reached by
    lowering it until the compute leg is the longer one."""
    base = _log_errors(model, cluster, cfg, groups, [], np.array([]), measured)[:len(groups)]
    keep = []
    for name in candidates:
        for bound in BOUNDS[name]:
            moved = _log_errors(model, cluster, cfg, groups, [name], np.array([math.log(bound)]), measured)
            if np.max(np.abs(moved[:len(groups)] - base)) >= _SENSITIVITY_MIN:
                keep.append(name)
                break
    return keep


def _start(model, cluster, cfg, groups, names, measured) -> np.ndarray:
    """Each factor alone, by bisection on its own groups (predicted time falls as a factor rises):
    the joint fit starts there, because a memory-bound class is flat in its factor near 1 and a
    gradient method started at 1 would never leave it."""
    theta = np.zeros(len(names))
    for i, name in enumerate(names):
        mine = [j for j, g in enumerate(groups) if group_factor(g) == name]
        lo, hi = math.log(BOUNDS[name][0]), math.log(BOUNDS[name][1])

        def r(th, name=name, mine=mine):
            return float(np.sum(_log_errors(model, cluster, cfg, groups, [name], np.array([th]), measured)[mine]))
        if not mine or r(hi) >= 0 or r(lo) <= 0:
            theta[i] = (hi if mine and r(hi) >= 0 else lo) if mine else 0.0
            continue
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if r(mid) > 0 else (lo, mid)
        theta[i] = 0.5 * (lo + hi)
    return theta


def _solve(model, cluster, cfg, groups, names, measured):
    from scipy.optimize import least_squares
    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    start = np.clip(_start(model, cluster, cfg, groups, names, measured), lo + 1e-9, hi - 1e-9)
    return least_squares(lambda th: _log_errors(model, cluster, cfg, groups, names, th, measured),
                         start, bounds=(lo, hi), diff_step=1e-3, xtol=1e-10, ftol=1e-12, max_nfev=200)


def _uncertainty(times: TraceTimes, groups, names, jac) -> dict[str, float]:
    from simtrain.calibrate.runs import RUN_NOISE
    spreads = [s for s in (times.relative_spread(g) for g in groups) if s is not None]
    s2 = max([RUN_NOISE ** 2] + [s * s for s in spreads])
    cov = s2 * np.linalg.pinv(jac.T @ jac)
    seen = np.linalg.norm(jac[:len(groups)], axis=0) > 1e-6
    return {n: (float(math.sqrt(max(cov[i, i], 0.0))) if seen[i] else float("inf")) for i, n in enumerate(names)}


def load_times(trace, steps: int | None = None, untraced_step_s: float | None = None) -> TraceTimes:
    """``trace`` (a path or :class:`TraceTimes`) read, less the profiler's own cost when the untraced
    step time is given (:func:`without_profiler_overhead`)."""
    if isinstance(trace, TraceTimes):
        times = trace
    elif isinstance(trace, (str, os.PathLike)):
        times = read_profiler_trace(Path(trace), steps=steps)
    else:
        raise SimtrainError(f"trace: expected a path or a TraceTimes, got {type(trace).__name__}")
    if untraced_step_s is None:
        return times
    if not (isinstance(untraced_step_s, (int, float)) and not isinstance(untraced_step_s, bool)
            and math.isfinite(untraced_step_s) and untraced_step_s > 0):
        raise SpecError.one(None, "untraced_step_s", f"must be a positive number of seconds, got {untraced_step_s!r}")
    return without_profiler_overhead(times, float(untraced_step_s))


def without_profiler_overhead(times: TraceTimes, untraced_step_s: float) -> TraceTimes:
    """``times`` less the profiler's own cost: the traced step ran ``step_s − untraced_step_s`` longer
    than the same step timed without the profiler; that excess is the instrumentation recorded around
    every unit (op call, autograd node), so each group gives back its units × the excess per unit,
    floored at a tenth of its time. Unchanged without step markers or when the trace was not slower.
    (Trace-driven simulators subtract the tracer's per-event cost the same way before replaying.)"""
    from dataclasses import replace
    units = sum(times.units.values())
    if times.step_s is None or units <= 0 or times.step_s <= untraced_step_s:
        return times
    per_unit = (times.step_s - untraced_step_s) / units
    seconds = {g: max(s - times.units.get(g, 0.0) * per_unit, 0.1 * s) for g, s in times.seconds.items()}
    calls = tuple(replace(c, fw_s=max(c.fw_s - per_unit, 0.1 * c.fw_s),
                          bw_s=max(c.bw_s - c.bw_units * per_unit, 0.1 * c.bw_s)) for c in times.calls)
    return replace(times, seconds=seconds, step_s=untraced_step_s, calls=calls)


def calibrate_classes(trace, model, cluster, config, steps: int | None = None,
                      untraced_step_s: float | None = None):
    """Fit per-class factors so the estimator reproduces the trace's per-class times (module docstring).

    ``trace``: a ``torch.profiler`` Chrome trace path or :class:`TraceTimes`; ``model`` / ``cluster`` /
    ``config``: what the traced run trained, on what, how (names, paths or objects, as ``st.estimate``).
    ``untraced_step_s``: the same step timed without the profiler; the trace's own overhead is then
    taken out first (:func:`without_profiler_overhead`)."""
    from simtrain.calibrate.run_record import Calibration, ClassFit
    from simtrain.inputs import as_cluster, as_config, as_model
    model, cluster, config = as_model(model), as_cluster(cluster), as_config(config)
    times = load_times(trace, steps, untraced_step_s)
    before = predicted_groups(model, cluster, config)
    groups = _fittable(times, before)
    if not groups:
        raise SpecError.one(times.source, "traceEvents", "no op class of the model holds enough of the trace's "
                            "time to calibrate (is it a trace of this model?)")
    measured = {g: times.seconds[g] for g in groups}
    names = _sensitive(model, cluster, config, groups, list(dict.fromkeys(group_factor(g) for g in groups)), measured)
    if names:
        sol = _solve(model, cluster, config, groups, names, measured)
        fitted = {n: float(v) for n, v in zip(names, np.exp(sol.x), strict=True)}
        unc = _uncertainty(times, groups, names, sol.jac)
    else:
        fitted, unc = {}, {}
    after = predicted_groups(model, scaled_cluster(cluster, fitted) if fitted else cluster, config)
    classes = [ClassFit(group=g, measured_s=s, predicted_s=before.get(g, 0.0), fitted_s=after.get(g, 0.0),
                        units=times.units.get(g, 0.0), fitted=g in groups)
               for g, s in times.seconds.items()]
    return Calibration(factors=fitted, uncertainty=unc, classes=classes, device=cluster.device.name,
                       stack=_stack_name(config), measured_step_s=times.step_s,
                       source=f"st.calibrate_classes on {times.steps} step(s) of {Path(times.source).name}"[:200])


def _stack_name(cfg) -> str:
    from simtrain.specs.stack_resolve import stack_of
    return stack_of(cfg).name


# ──── Op by op ──────────────────────────────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class OpComparison:
    """One model op and the trace call paired with it (either side None when unpaired)."""

    group: str
    """Op class (``conv``, ``matmul``, …) both sides share."""
    op: str | None
    """The model's op name, None for a trace call with no op of the model to pair."""
    call: str | None
    """The trace call's outermost ATen op, None for a model op the trace has no call for."""
    measured_fw_s: float | None
    measured_bw_s: float | None
    predicted_fw_s: float | None
    predicted_bw_s: float | None

    @property
    def measured_s(self) -> float | None:
        return None if self.measured_fw_s is None else self.measured_fw_s + (self.measured_bw_s or 0.0)

    @property
    def predicted_s(self) -> float | None:
        return None if self.predicted_fw_s is None else self.predicted_fw_s + (self.predicted_bw_s or 0.0)

    @property
    def gap_s(self) -> float:
        """Measured − predicted seconds per step (an unpaired side counts as 0)."""
        return (self.measured_s or 0.0) - (self.predicted_s or 0.0)

    def as_dict(self) -> dict:
        return dict(asdict(self), measured_s=self.measured_s, predicted_s=self.predicted_s, gap_s=self.gap_s)


def predicted_ops(model, cluster, cfg) -> list[tuple[str, str, float, float]]:
    """(op name, op class, forward s, backward s) per step of every op of the model, in execution order."""
    model, program, coster, _ = stage_setup(model, cluster, cfg)
    k = program.layout.micro_batches
    out = []
    for op in model.ops:
        c = coster(op)
        out.append((op.name, op.op_class.value, k * c.fw_s, k * c.bw_s))
    return out


def pair_calls(calls, ops) -> list[OpComparison]:
    """Pair trace calls (:class:`~simtrain.calibrate.trace.CallTime`) with predicted ops (as
    :func:`predicted_ops` returns them) class by class, in order; the rest stay unpaired."""
    by_group: dict[str, tuple[list, list]] = {}
    for c in calls:
        by_group.setdefault(c.group, ([], []))[0].append(c)
    for o in ops:
        by_group.setdefault(o[1], ([], []))[1].append(o)
    rows = []
    for group, (cs, os_) in by_group.items():
        for i in range(max(len(cs), len(os_))):
            c = cs[i] if i < len(cs) else None
            o = os_[i] if i < len(os_) else None
            rows.append(OpComparison(group=group, op=o[0] if o else None, call=c.root if c else None,
                                     measured_fw_s=c.fw_s if c else None, measured_bw_s=c.bw_s if c else None,
                                     predicted_fw_s=o[2] if o else None, predicted_bw_s=o[3] if o else None))
    return rows


def compare_ops(trace, model, cluster, config, steps: int | None = None,
                untraced_step_s: float | None = None) -> list[OpComparison]:
    """Each op of ``model`` against the call of ``trace`` it pairs with (module docstring); arguments
    as :func:`~simtrain.calibrate.trace_fit.calibrate_classes`."""
    from simtrain.errors import SpecError
    from simtrain.inputs import as_cluster, as_config, as_model
    model, cluster, config = as_model(model), as_cluster(cluster), as_config(config)
    times = load_times(trace, steps, untraced_step_s)
    if not times.calls:
        raise SpecError.one(times.source, "traceEvents", "no step's forward calls can be read (the trace needs "
                            "ProfilerStep# or Optimizer.step# markers around whole steps)")
    return pair_calls(times.calls, predicted_ops(model, cluster, config))


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{1e3 * x:.3f}"


def ops_table(rows: list[OpComparison], top: int = 20) -> str:
    """The ``top`` rows with the largest |measured − predicted|, as a Markdown table (ms per step)."""
    shown = sorted(rows, key=lambda r: -abs(r.gap_s))[:max(top, 0)]
    lines = ["| op | trace call | class | measured fw / bw ms | predicted fw / bw ms | measured / predicted |",
             "|---|---|---|---:|---:|---:|"]
    for r in shown:
        ratio = f"{r.measured_s / r.predicted_s:.2f}" if r.measured_s is not None and r.predicted_s else "—"
        lines.append(f"| {r.op or '(none)'} | {r.call or '(none)'} | {r.group} | "
                     f"{_ms(r.measured_fw_s)} / {_ms(r.measured_bw_s)} | {_ms(r.predicted_fw_s)} / "
                     f"{_ms(r.predicted_bw_s)} | {ratio} |")
    measured = sum(r.measured_s or 0.0 for r in rows)
    predicted = sum(r.predicted_s or 0.0 for r in rows)
    lines.append(f"\nAll {len(rows)} rows: measured {1e3 * measured:.2f} ms, predicted {1e3 * predicted:.2f} ms per "
                 "step (calls and ops only: no optimizer, no time between calls).")
    return "\n".join(lines)
