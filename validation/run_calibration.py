"""Runs measured here as calibration input (issue 12): the suite's own step timings become
``st.RunRecord``s and ``st.calibrate_runs`` fits stack-level factors on top of the microbenchmark
profile.

Two checks, both on step times the suite has already measured (nothing is timed again):

* **zoo → unseen**: fit on the zoo's runs, predict the unseen models (``step_time_unseen_runs``),
  beside their prediction from the microbenchmark profile alone (``step_time_unseen``);
* **leave-one-out** over every model (``step_time_loo``): each run predicted by a fit on the others.

The records carry the calibrated step device, so the factors are what the runs say beyond the
microbenchmarks (1.0: the runs agree with the profile).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import simtrain as st
from validation.report import Case
from validation.steps import train_config

__all__ = ["MeasuredRun", "run_cases", "run_section"]


@dataclass(frozen=True)
class MeasuredRun:
    case: str
    model: st.Model
    batch: int
    optimizer: str
    step_time_s: float
    unseen: bool


def _record(run: MeasuredRun, device) -> st.RunRecord:
    return st.RunRecord(model=run.model, cluster=st.Cluster.single(device), config=train_config(run.batch, run.optimizer),
                        step_time_s=run.step_time_s, name=run.case)


def _predict(cal: st.Calibration, rec: st.RunRecord) -> float:
    return st.estimate(rec.model, cal.apply(rec.cluster), rec.config).step_time_s


def run_cases(runs: Sequence[MeasuredRun], device) -> list[Case]:
    """``step_time_unseen_runs`` (fit on the zoo's runs) and ``step_time_loo`` (fit on all the others)."""
    zoo = [_record(r, device) for r in runs if not r.unseen]
    unseen = [_record(r, device) for r in runs if r.unseen]
    cases: list[Case] = []
    if zoo and unseen:
        cal = st.calibrate_runs(zoo)
        detail = {"factors": dict(cal.factors), "uncertainty": dict(cal.uncertainty), "fitted_on": [r.name for r in zoo]}
        cases += [Case(r.name, "step_time_unseen_runs", _predict(cal, r), r.step_time_s, detail=detail) for r in unseen]
    everything = zoo + unseen
    if len(everything) >= 2:
        cal = st.calibrate_runs(everything)
        for fit, rec in zip(cal.records, everything, strict=True):
            if fit.loo_predicted_s is not None:
                cases.append(Case(rec.name, "step_time_loo", fit.loo_predicted_s, rec.step_time_s,
                                  detail={"factors_all": dict(cal.factors)}))
    return cases


def run_section(cases: Sequence[Case]) -> list[str]:
    """Markdown for the report: the fitted factors and the errors before / after."""
    after = [c for c in cases if c.metric == "step_time_unseen_runs"]
    if not after:
        return []
    before = {c.case: c for c in cases if c.metric == "step_time_unseen"}
    f = after[0].detail["factors"]
    u = after[0].detail["uncertainty"]
    lines = ["`st.calibrate_runs` on the zoo's measured step times (" + ", ".join(after[0].detail["fitted_on"])
             + ") fits " + ", ".join(f"{k} × {v:.3f} (± {100 * u.get(k, 0.0):.1f} %)" for k, v in f.items())
             + "; the unseen models predicted with it:", "",
             "| unseen model | measured | profile alone | + zoo runs |", "|---|---:|---:|---:|"]
    for c in after:
        b = before.get(c.case)
        was = f"{b.predicted * 1e3:.1f} ms ({b.error_pct:+.1f} %)" if b else "—"
        lines.append(f"| {c.case} | {c.measured * 1e3:.1f} ms | {was} | {c.predicted * 1e3:.1f} ms ({c.error_pct:+.1f} %) |")
    loo = [c for c in cases if c.metric == "step_time_loo"]
    if loo:
        mape = sum(abs(c.error_pct) for c in loo) / len(loo)
        lines += ["", f"Leave-one-out over all {len(loo)} models (each predicted by a fit on the other "
                  f"{len(loo) - 1}; factors on all: "
                  + ", ".join(f"{k} × {v:.3f}" for k, v in loo[0].detail["factors_all"].items())
                  + f"): MAPE {mape:.1f} %, worst {max(abs(c.error_pct) for c in loo):.1f} %."]
    return lines
