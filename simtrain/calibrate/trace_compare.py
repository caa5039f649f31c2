"""Op by op: a profiler trace's forward calls, each with its backward, against simtrain's per-op costs.

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

from dataclasses import asdict, dataclass

__all__ = ["OpComparison", "compare_ops", "predicted_ops", "pair_calls", "ops_table"]


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
    from simtrain.calibrate.trace_fit import stage_setup
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
    from simtrain.calibrate.trace_fit import load_times
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
