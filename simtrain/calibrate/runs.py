"""One-shot calibration from measured training runs (``st.RunRecord`` → ``st.calibrate_runs`` →
``st.Calibration``): the fit and the factors it fits.

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

The factors are in :mod:`simtrain.calibrate.factors`, the memory term in
:mod:`simtrain.calibrate.memory_term`, the records and the result in
:mod:`simtrain.calibrate.run_record`; run records from files in :mod:`simtrain.calibrate.run_files`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

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
from simtrain.calibrate.memory_term import (  # noqa: F401  (re-exported)
    MEMORY_NOISE,
    MEMORY_SCALE_BOUNDS,
    fit_memory_scale,
    predicted_peak,
    with_memory_scale,
)
from simtrain.calibrate.run_record import (  # noqa: F401  (re-exported)
    Calibration,
    ClassFit,
    RecordFit,
    RunRecord,
    load_calibration,
)
from simtrain.errors import SpecError

__all__ = ["FACTORS", "BOUNDS", "CLASS_FACTORS", "class_factor", "scaled_efficiency", "scaled_device",
           "scaled_cluster", "check_factors", "MEMORY_SCALE_BOUNDS", "MEMORY_NOISE", "fit_memory_scale",
           "with_memory_scale", "predicted_peak", "RunRecord", "Calibration", "RecordFit", "ClassFit",
           "calibrate_runs", "load_calibration", "RUN_NOISE", "MAX_UNCERTAINTY"]


RUN_NOISE = 0.02
"""Relative run-to-run spread of a measured step time (steady-state steps of one job vary by ~1–3 %):
the floor of the residual scatter used for the uncertainty."""

_SENSITIVITY_MIN = 0.01
MAX_UNCERTAINTY = 0.5
"""A factor chosen automatically whose fitted value is uncertain by more than ± this (relative), or
that sits at a bound (unbounded uncertainty), is dropped and the others refitted: the runs do not
identify it, and a free factor the data cannot pin only moves predictions elsewhere at random."""


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
    from simtrain.specs.stack_resolve import stack_of
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
