"""One-shot calibration from measured training runs (``st.RunRecord`` → ``st.calibrate_runs`` →
``st.Calibration``): the fit, the factors it fits, its memory term, and run records from files.

Run calibration
---------------

One-shot calibration from measured training runs: ``st.RunRecord`` → ``st.calibrate_runs`` → ``st.Calibration``.

    rec = st.RunRecord(model=model, cluster=cluster, config=cfg, step_time_s=1.84)
    cal = st.calibrate_runs([rec])              # one run fits one factor ("compute")
    cal.factors, cal.uncertainty, cal.loo_error
    st.estimate(other_model, cal.apply(cluster), other_cfg)     # the fitted stack, elsewhere
    cal.to_yaml("my-stack.yaml"); st.load_calibration("my-stack.yaml")

Method: least squares on ``log(predicted / measured)`` over the records, in log-factor space, with
the bounds of the factors below (:data:`BOUNDS`), through ``st.estimate`` itself (so every mechanism of
the model is in the loop). How many factors: :func:`factors_for` (one run fits one), in the priority order compute,
communication, memory, launch, skipping any the records cannot see (a factor that moves no
prediction by ≥ 1 % when doubled) and dropping, one at a time, any the fit cannot pin
(:data:`MAX_UNCERTAINTY`). Uncertainty: the standard error of each log-factor from the
Gauss-Newton covariance ``s² (JᵀJ)⁻¹``, with ``s`` the residual scatter — never below
:data:`RUN_NOISE`, the run-to-run spread of a measured step time — reported as a relative (±)
figure. Leave-one-out: each record predicted by a fit on the others (needs ≥ 2 records).

Runs predicted not to fit: a record is a run that ran, so it did fit. When ``st.estimate`` says its
layout overflows device memory (``feasible`` False with only the out-of-memory reason, yet a finite
step time), its step time is fitted all the same and the calibration carries a warning naming the
record with its predicted reserved memory against the usable capacity (``Calibration.warnings``).
Every record's fit keeps its predicted peak reserved bytes and, when the run gave
``peak_memory_bytes``, the memory residual predicted / measured − 1 (``RecordFit.memory_error``).
A record whose layout cannot be built (no finite step time: e.g. a tp that does not divide the
heads) is still a :class:`SpecError` naming the record and the reasons. The time factors scale rates,
never memory. Records that give a peak also fit one bounded memory term, the scale on the memory
model's transient tensors (the memory term below, ``Calibration.memory_scale``;
``cal.config(cfg)`` applies it), and their memory residuals are reported with it.

Any cluster size: records may come from one device or many nodes, and ``cal.apply`` takes any node
count: the factors scale the device's efficiency profile (communication: every link tier alike).

The memory term
---------------

The memory term of one-shot calibration: ``Stack.transient_memory_scale`` from measured peaks.

The memory model is linear in the scale on its transient tensors (activations kept for the backward
and the backward's working set, ``parallel/memory_plan.py``): a record's predicted peak of the kind it
measured (reserved or allocated, ``RunRecord.peak_memory_kind``) is ``base + f · slope``, read off two
estimates (f = 1 and f = 2) so every mechanism of the memory model stays in the loop. ``f`` minimises
the relative residuals Σ ((base + f · slope) / measured − 1)² over the records that give a peak, in
closed form, clipped to :data:`MEMORY_SCALE_BOUNDS` (at a bound its uncertainty is infinite). Its uncertainty is the standard error of that
least-squares slope with the residual scatter floored at :data:`MEMORY_NOISE`. The time factors
never touch memory, so the two fits are independent.

The factors are in :mod:`simtrain.calibrate.factors`; run records from files in
:mod:`simtrain.calibrate.run_files`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from simtrain.calibrate.factors import (  # noqa: F401  (re-exported: the fit's factors, as before)
    BOUNDS,
    CLASS_FACTORS,
    FACTORS,
    check_factors,
    class_factor,
    scaled_cluster,
    scaled_device,
    scaled_efficiency,
)
from simtrain.errors import SpecError
from simtrain.specs.base import Spec
from simtrain.specs.hardware import Cluster
from simtrain.specs.stack import named_stack

__all__ = ["FACTORS", "BOUNDS", "CLASS_FACTORS", "class_factor", "scaled_efficiency", "scaled_device",
           "scaled_cluster", "check_factors", "MEMORY_SCALE_BOUNDS", "MEMORY_NOISE", "fit_memory_scale",
           "with_memory_scale", "predicted_peak", "RunRecord", "Calibration", "RecordFit", "ClassFit",
           "calibrate_runs", "load_calibration", "RUN_NOISE", "MAX_UNCERTAINTY"]


# ──── The memory term ───────────────────────────────────────────────────────────────────────────────

MEMORY_SCALE_BOUNDS = (0.5, 2.0)
"""A measured peak may halve or double the modelled transient memory, no more: beyond that the
layout or the recompute policy is wrong, not the model's bytes per tensor."""

MEMORY_NOISE = 0.01
"""Floor of the relative residual scatter: a peak reading moves by ~1 % between steps and ranks
(allocator state)."""


def with_memory_scale(cfg, device, scale: float):
    """``cfg`` with its stack's ``transient_memory_scale`` set to ``scale`` (the stack it runs on
    ``device``: its own, or the GPU default when it names none)."""
    stack = named_stack(cfg, device).with_overrides(transient_memory_scale=scale)
    return cfg.model_copy(update={"stack": stack})


def predicted_peak(rec, scale: float = 1.0) -> float | None:
    """The record's predicted peak of the kind it measured, with the transient scale ``scale``."""
    from simtrain.estimator import estimate
    r = estimate(rec.model, rec.cluster, with_memory_scale(rec.config, rec.cluster.device, scale))
    if r.memory is None:
        return None
    return r.memory.total_bytes if rec.peak_memory_kind == "allocated" else r.memory.reserved_bytes


def fit_memory_scale(records) -> tuple[float, float] | None:
    """(scale, relative standard error) from the records that give ``peak_memory_bytes``; None when
    none does (or none has transient memory to scale)."""
    rows = []
    for rec in records:
        if rec.peak_memory_bytes is None:
            continue
        one, two = predicted_peak(rec, 1.0), predicted_peak(rec, 2.0)
        if one is None or two is None or two <= one:
            continue
        slope = two - one
        rows.append((one - slope, slope, float(rec.peak_memory_bytes)))
    if not rows:
        return None
    # relative least squares: residual_i = (base_i + f · slope_i) / m_i − 1 = f · x_i − y_i
    xs = [s / m for _, s, m in rows]
    ys = [1.0 - b / m for b, _, m in rows]
    sxx = sum(x * x for x in xs)
    lo, hi = MEMORY_SCALE_BOUNDS
    raw = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    f = min(hi, max(lo, raw))
    if f != raw:  # at a bound: the peaks ask for more than the term may give
        return f, math.inf
    dof = max(1, len(rows) - 1)
    scatter = max(MEMORY_NOISE, math.sqrt(sum((f * x - y) ** 2 for x, y in zip(xs, ys, strict=True)) / dof))
    return f, scatter / math.sqrt(sxx) / f


# ──── Run calibration ───────────────────────────────────────────────────────────────────────────────

RUN_NOISE = 0.02
"""Relative run-to-run spread of a measured step time (steady-state steps of one job vary by ~1–3 %):
the floor of the residual scatter used for the uncertainty."""

_SENSITIVITY_MIN = 0.01
MAX_UNCERTAINTY = 0.5
"""A factor chosen automatically whose fitted value is uncertain by more than ± this (relative), or
that sits at a bound (unbounded uncertainty), is dropped and the others refitted: the runs do not
identify it, and a free factor the data cannot pin only moves predictions elsewhere at random."""


@dataclass(frozen=True)
class RunRecord:
    """One measured run: what was trained, on what, how, and the measured step time (and memory)."""

    model: Any
    cluster: Any
    config: Any
    step_time_s: float
    peak_memory_bytes: float | None = None
    """Measured peak memory of the busiest rank, if known: ``torch.cuda.max_memory_reserved`` or
    ``max_memory_allocated``, as ``peak_memory_kind`` says."""
    name: str = ""
    peak_memory_kind: str = "reserved"
    """Which peak ``peak_memory_bytes`` is: "reserved" (what the process took from the device, the
    figure nvidia-smi and most framework logs show) or "allocated" (the tensors alone). The memory
    residual compares it with the matching prediction (``MemoryReport.reserved_bytes`` or
    ``total_bytes``)."""

    def __post_init__(self) -> None:
        from simtrain.graph.model import Model
        from simtrain.specs.train import TrainConfig
        where = f"RunRecord {self.name!r}" if self.name else "RunRecord"
        for field, kind in (("model", Model), ("cluster", Cluster), ("config", TrainConfig)):
            if not isinstance(getattr(self, field), kind):
                raise SpecError.one(where, field, f"must be a {kind.__name__} (got {type(getattr(self, field)).__name__}); "
                                    f"load it with st.load_{field if field != 'config' else 'job'} or build it")
        if self.peak_memory_kind not in ("reserved", "allocated"):
            raise SpecError.one(where, "peak_memory_kind", f"must be 'reserved' or 'allocated' "
                                f"(got {str(self.peak_memory_kind)[:40]!r})")
        for field in ("step_time_s", "peak_memory_bytes"):
            v = getattr(self, field)
            if v is None and field == "peak_memory_bytes":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SpecError.one(where, field, "must be a finite number > 0")

    @property
    def label(self) -> str:
        return self.name or f"{self.model.name} on {self.cluster.devices_count} × {self.cluster.device.name}"

    @classmethod
    def from_profiler_trace(cls, path: str | Path, model, cluster, config, steps: int | None = None,
                            name: str = "") -> RunRecord:
        """A run whose step time is the mean marked step of a ``torch.profiler`` trace (ProfilerStep#
        or Optimizer.step# spans; :mod:`simtrain.calibrate.trace`). For per-class factors from the
        same trace use :func:`simtrain.calibrate.trace_fit.calibrate_classes`."""
        from simtrain.calibrate.trace import read_profiler_trace
        from simtrain.inputs import as_cluster, as_config, as_model
        times = read_profiler_trace(path, steps=steps)
        if times.step_s is None:
            raise SpecError.one(str(path), "traceEvents", "no step markers to time a step by (profile with "
                                "torch.profiler's schedule and prof.step(), or a torch.optim optimizer)")
        return cls(model=as_model(model), cluster=as_cluster(cluster), config=as_config(config),
                   step_time_s=times.step_s, name=name or Path(path).name)


class RecordFit(Spec):
    """One record after the fit: measured vs predicted (and the same with it left out)."""

    name: str
    measured_s: float
    predicted_s: float
    loo_predicted_s: float | None = None
    measured_memory_bytes: float | None = None
    """The run's measured peak memory (``RunRecord.peak_memory_bytes``), if given."""
    predicted_memory_bytes: float | None = None
    """Predicted peak reserved bytes of the busiest rank (``StepReport.memory.reserved_bytes``)."""
    predicted_allocated_bytes: float | None = None
    """Predicted peak allocated bytes of that rank (``StepReport.memory.total_bytes``)."""
    memory_kind: str = "reserved"
    """Which peak the measured number is (``RunRecord.peak_memory_kind``): the residual compares it
    with the prediction of the same kind."""
    memory_capacity_bytes: Annotated[float, Field(gt=0)] | None = None
    """That rank's usable device memory: predicted reserved above it is a run predicted not to fit."""

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def memory_error(self) -> float | None:
        """Relative memory residual predicted / measured − 1 (None without both numbers)."""
        predicted = self.predicted_allocated_bytes if self.memory_kind == "allocated" else self.predicted_memory_bytes
        if predicted is None or not self.measured_memory_bytes:
            return None
        return predicted / self.measured_memory_bytes - 1.0

    @property
    def predicted_overflow(self) -> bool:
        """True when the predicted reserved bytes exceed the usable capacity."""
        return (self.predicted_memory_bytes is not None and self.memory_capacity_bytes is not None
                and self.predicted_memory_bytes > self.memory_capacity_bytes)

    @property
    def loo_error(self) -> float | None:
        return None if self.loo_predicted_s is None else self.loo_predicted_s / self.measured_s - 1.0


class ClassFit(Spec):
    """One group of a profiler trace (an op class, ``optimizer``, ``unmapped``): seconds per step."""

    group: str
    measured_s: Annotated[float, Field(ge=0)]
    predicted_s: Annotated[float, Field(ge=0)]
    """Before the fit."""
    fitted_s: Annotated[float, Field(ge=0)]
    """With the fitted factors."""
    units: Annotated[float, Field(ge=0)] = 0.0
    """Top-level op calls per step in the trace."""
    fitted: bool = False
    """True when the group had enough time to take part in the fit."""


class Calibration(Spec):
    """Fitted stack-level factors and how well they hold."""

    factors: dict[str, Annotated[float, Field(gt=0)]]
    """Fitted multipliers (see :data:`FACTORS`); factors not fitted are absent (= 1)."""
    uncertainty: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=True)]] = Field(default_factory=dict)
    """Relative standard error of each fitted factor (0.03 = ±3 %; inf when the runs cannot pin it)."""
    loo_error: Annotated[float, Field(ge=0)] | None = None
    """Mean absolute leave-one-out error of the step time (None with one record)."""
    records: list[RecordFit] = Field(default_factory=list)
    stack: str | None = None
    """The stack the records ran (the factors belong to it)."""
    device: str | None = None
    source: str = "st.calibrate_runs"
    classes: list[ClassFit] = Field(default_factory=list)
    """Per op class of a profiler-trace calibration (st.calibrate_classes): measured vs predicted."""
    measured_step_s: Annotated[float, Field(gt=0)] | None = None
    """The traced run's mean step wall time (None without step markers)."""
    warnings: tuple[str, ...] = ()
    """One line per record that ran although predicted not to fit in memory (its time fitted anyway)."""
    memory_scale: Annotated[float, Field(gt=0)] | None = None
    """Fitted ``Stack.transient_memory_scale`` from the records' measured peaks (None: no record gave one)."""
    memory_scale_uncertainty: Annotated[float, Field(ge=0, allow_inf_nan=True)] | None = None
    """Its relative standard error (inf when it sits at a bound of ``MEMORY_SCALE_BOUNDS``)."""

    def model_post_init(self, _context) -> None:
        check_factors(self.factors)

    def apply(self, cluster):
        """``cluster`` with the fitted factors applied to its device's efficiency profile."""
        return scaled_cluster(cluster, self.factors, f"calibration ({self.source})")

    def config(self, cfg, device=None):
        """``cfg`` with the fitted memory term on its stack (unchanged when no peak was fitted); ``device``
        picks the stack a config naming none runs (the GPU default)."""
        if self.memory_scale is None:
            return cfg
        return with_memory_scale(cfg, device, self.memory_scale)

    def to_yaml(self, path: str | Path) -> Path:
        import yaml

        from simtrain.outputs import YAML_SUFFIXES, check_output_path
        path = check_output_path(path, "path", YAML_SUFFIXES)  # its folder made; a directory refused
        doc = {"spec": "calibration", **self.model_dump(mode="json")}
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return path

    def summary(self) -> str:
        what = f"{len(self.records)} run(s)" if self.records or not self.classes else self.source
        lines = [f"calibration of stack {self.stack or '(none named)'} on {self.device or '?'}: {what}"]
        for name, value in self.factors.items():
            lines.append(f"  {name:<18} {value:.3f} ± {100 * self.uncertainty.get(name, float('nan')):.1f} %")
        if self.memory_scale is not None:
            unc = self.memory_scale_uncertainty if self.memory_scale_uncertainty is not None else float("nan")
            lines.append(f"  {'memory (transient)':<18} {self.memory_scale:.3f} ± {100 * unc:.1f} %  "
                         "(Calibration.config applies it)")
        for r in self.records:
            loo = "" if r.loo_error is None else f"   left out {100 * r.loo_error:+.1f} %"
            lines.append(f"  {r.name:<40} measured {r.measured_s:.4g} s  fitted {100 * r.error:+.1f} %{loo}")
            lines += _memory_lines(r)
        if self.loo_error is not None:
            lines.append(f"  leave-one-out mean |error| {100 * self.loo_error:.1f} %")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines + self._class_lines())

    def _class_lines(self) -> list[str]:
        if not self.classes:
            return []
        lines = [f"  {'group':<12} {'measured':>11} {'predicted':>11} {'fitted':>11}   per step"]
        for c in self.classes:
            mark = "" if c.fitted else ("   (not in the model)" if c.predicted_s == 0 else "   (too little time: factor 1)")
            lines.append(f"  {c.group:<12} {1e3 * c.measured_s:>8.3f} ms {1e3 * c.predicted_s:>8.3f} ms "
                         f"{1e3 * c.fitted_s:>8.3f} ms{mark}")
        if self.measured_step_s is not None:
            covered = sum(c.measured_s for c in self.classes)
            lines.append(f"  step {1e3 * self.measured_step_s:.3f} ms, of which {100 * covered / self.measured_step_s:.0f} % "
                         "inside ops (the rest: Python and the autograd engine between them)")
        return lines


def _memory_lines(r: RecordFit) -> list[str]:
    """The record's memory: predicted reserved vs usable, and vs measured when the run gave it."""
    from simtrain.report.format import format_bytes
    if r.predicted_memory_bytes is None:
        return []
    cap = "" if r.memory_capacity_bytes is None else f" of {format_bytes(r.memory_capacity_bytes)} usable"
    over = "  (predicted not to fit)" if r.predicted_overflow else ""
    measured = "" if r.memory_error is None else (f"  measured {format_bytes(r.measured_memory_bytes)} "
                                                  f"{r.memory_kind}  memory {100 * r.memory_error:+.1f} %")
    alloc = "" if r.predicted_allocated_bytes is None else f" ({format_bytes(r.predicted_allocated_bytes)} allocated)"
    return [f"    memory: predicted {format_bytes(r.predicted_memory_bytes)} reserved{alloc}{cap}{measured}{over}"]


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration written by ``Calibration.to_yaml`` (safe YAML, validated, size-capped)."""
    from pydantic import ValidationError

    from simtrain.specs.base import spec_error_from_validation
    from simtrain.specs.reading import read_yaml_file
    path = Path(path)
    doc, _ = read_yaml_file(path, limit=4 * 2**20, what="calibration")  # regular file, capped, bounded YAML
    if not isinstance(doc, dict) or doc.pop("spec", None) != "calibration":
        raise SpecError.one(str(path), "spec", "not a calibration file: it starts with 'spec: calibration'")
    try:
        return Calibration.model_validate(doc)
    except ValidationError as err:
        raise spec_error_from_validation(err, str(path)) from None
    except SpecError as err:
        raise SpecError.one(str(path), "factors", str(err)) from None


# ----------------------------------------------------------------------------------------------
def _predict(rec: RunRecord, factors: dict[str, float]):
    from simtrain.estimator import estimate
    return estimate(rec.model, scaled_cluster(rec.cluster, factors) if factors else rec.cluster, rec.config)


def _memory_only(r) -> bool:
    """Infeasible only because the predicted memory overflows: the step time is still predicted."""
    return not r.feasible and r.memory is not None and not r.memory.fits and math.isfinite(r.step_time_s)


def _fittable(r) -> bool:
    """A prediction a run's step time can be fitted to: feasible, or over memory only (the run ran,
    so it did fit: the memory model over-predicts it; its time model still holds)."""
    return (r.feasible and math.isfinite(r.step_time_s)) or _memory_only(r)


def _log_errors(records, names, theta) -> np.ndarray:
    factors = dict(zip(names, np.exp(theta), strict=True))
    out = []
    for rec in records:
        r = _predict(rec, factors)
        if not _fittable(r):
            raise SpecError.one(rec.label, "config", "the run is predicted infeasible, not for memory alone "
                                "(its layout cannot be built here): " + "; ".join(r.reasons)[:300])
        out.append(math.log(r.step_time_s / rec.step_time_s))
    return np.array(out)


def _identifiable(records, wanted: int, candidates=FACTORS) -> list[str]:
    """The first ``wanted`` factors (priority order) that move some prediction by ≥ 1 % when doubled."""
    base = _log_errors(records, [], np.array([]))
    chosen = []
    for name in candidates:
        if len(chosen) == wanted:
            break
        moved = _log_errors(records, [name], np.array([math.log(2.0)])) - base
        if np.max(np.abs(moved)) >= _SENSITIVITY_MIN:
            chosen.append(name)
    return chosen


def _fit(records, names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log-factors, residuals, Jacobian) of the bounded least-squares fit."""
    from scipy.optimize import least_squares
    if not names:
        return np.array([]), _log_errors(records, [], np.array([])), np.zeros((len(records), 0))
    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    sol = least_squares(lambda th: _log_errors(records, names, th), np.zeros(len(names)), bounds=(lo, hi),
                        diff_step=1e-3, xtol=1e-10, ftol=1e-12, max_nfev=200)
    return sol.x, sol.fun, sol.jac


def _uncertainty(names, residuals, jac) -> dict[str, float]:
    n, k = jac.shape
    scatter2 = float(residuals @ residuals) / (n - k) if n > k else 0.0
    s2 = max(scatter2, RUN_NOISE ** 2)
    # a factor pinned at its bound (or one the records barely see) has a ~zero column: its
    # uncertainty is unbounded, reported as inf, and the others come from the pseudo-inverse
    cov = s2 * np.linalg.pinv(jac.T @ jac)
    seen = np.linalg.norm(jac, axis=0) > 1e-6
    return {name: (float(math.sqrt(max(cov[i, i], 0.0))) if seen[i] else float("inf"))
            for i, name in enumerate(names)}


def factors_for(runs: int) -> int:
    """How many factors ``runs`` records support: one for one or two runs, then one per two runs
    (so each fitted factor keeps a residual degree of freedom to measure its uncertainty), at most 4."""
    return min(len(FACTORS), max(1, runs // 2))


def calibrate_runs(records, factors: list[str] | None = None) -> Calibration:
    """Fit stack-level factors to measured runs (see the module docstring).

    ``factors`` forces which factors to fit (names from ``simtrain.calibrate.runs.FACTORS``);
    by default as many as the records identify, at most one per record."""
    records = list(records)
    if not records or not all(isinstance(r, RunRecord) for r in records):
        raise SpecError.one(None, "records", "give one or more st.RunRecord")
    if factors is not None:
        check_factors({f: 1.0 for f in factors})
        names = list(factors)
    else:
        names = _identifiable(records, factors_for(len(records)))
    theta, residuals, jac = _fit(records, names)
    while factors is None and len(names) > 1:
        unc = _uncertainty(names, residuals, jac)
        worst = max(names, key=lambda n: unc[n])
        if unc[worst] <= MAX_UNCERTAINTY:
            break
        names = [n for n in names if n != worst]  # the runs cannot pin it: refit without it
        theta, residuals, jac = _fit(records, names)
    fitted = dict(zip(names, (float(v) for v in np.exp(theta)), strict=True))
    loo = _leave_one_out(records, names) if len(records) >= 2 else [None] * len(records)
    memory = fit_memory_scale(records)
    scale = None if memory is None else memory[0]
    pairs = [_record_fit(rec, fitted, p, scale) for rec, p in zip(records, loo, strict=True)]
    fits = [fit for fit, _ in pairs]
    loo_errors = [abs(f.loo_error) for f in fits if f.loo_error is not None]
    stacks = {_stack_name(r.config) for r in records}
    devices = {r.cluster.device.name for r in records}
    return Calibration(factors=fitted, uncertainty=_uncertainty(names, residuals, jac),
                       loo_error=(sum(loo_errors) / len(loo_errors)) if loo_errors else None,
                       records=fits, stack=", ".join(sorted(stacks)), device=", ".join(sorted(devices)),
                       source=f"st.calibrate_runs on {len(records)} run(s)",
                       warnings=tuple(note for _, note in pairs if note is not None),
                       memory_scale=scale, memory_scale_uncertainty=None if memory is None else memory[1])


def _stack_name(cfg) -> str:
    from simtrain.specs.stack import stack_of
    return stack_of(cfg).name


def _leave_one_out(records, names) -> list[float | None]:
    out = []
    for i, rec in enumerate(records):
        rest = records[:i] + records[i + 1:]
        sub = names[:len(rest)]
        theta, _, _ = _fit(rest, sub)
        r = _predict(rec, dict(zip(sub, np.exp(theta), strict=True)))
        out.append(r.step_time_s if _fittable(r) else None)
    return out


def _record_fit(rec: RunRecord, factors: dict[str, float], loo_s: float | None,
                memory_scale: float | None = None) -> tuple[RecordFit, str | None]:
    """The record's fit (its memory with the fitted memory term, when there is one), and the warning
    when it ran although the shipped memory model predicts it not to fit."""
    r = _predict(rec, factors)
    fit = _fit_of(rec, r, loo_s)
    warning = _overflow_warning(fit, r.reasons) if _memory_only(r) else None
    if memory_scale is not None:  # time does not depend on the memory term: only the memory numbers move
        scaled = dataclasses.replace(rec, config=with_memory_scale(rec.config, rec.cluster.device, memory_scale))
        fit = _fit_of(rec, _predict(scaled, factors), loo_s)
    return fit, warning


def _fit_of(rec: RunRecord, r, loo_s: float | None) -> RecordFit:
    mem = alloc = cap = None
    if r.memory is not None:
        mem, alloc, cap = r.memory.reserved_bytes, r.memory.total_bytes, r.memory.capacity_bytes
    return RecordFit(name=rec.label, measured_s=rec.step_time_s, predicted_s=r.step_time_s, loo_predicted_s=loo_s,
                     measured_memory_bytes=rec.peak_memory_bytes, predicted_memory_bytes=mem,
                     predicted_allocated_bytes=alloc, memory_capacity_bytes=cap, memory_kind=rec.peak_memory_kind)


def _overflow_warning(fit: RecordFit, reasons) -> str:
    from simtrain.report.format import format_bytes
    if fit.predicted_overflow:
        why = (f"reserves {format_bytes(fit.predicted_memory_bytes)} of "
               f"{format_bytes(fit.memory_capacity_bytes)} usable")
    else:  # over another limit (e.g. the host memory of offloaded state)
        why = "; ".join(reasons)[:300]
    measured = "" if fit.memory_error is None else (f" (measured {format_bytes(fit.measured_memory_bytes)}: "
                                                    f"predicted {100 * fit.memory_error:+.1f} %)")
    return (f"{fit.name}: ran, yet predicted not to fit in memory: {why}{measured}; "
            "its step time is fitted all the same")


