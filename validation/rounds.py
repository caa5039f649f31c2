"""Repeated rounds: the calibration and the step timings sampled alike over time (issue 12).

On a shared machine the speed drifts over minutes — on this project's 2-core VM the same
microbenchmark rows re-timed ten minutes apart move by a median 0.6–1.3× per benchmark group, and
a zoo model's step by ±15 % — while one calibration and one step timing are each a snapshot. A
prediction then compares two different machines. With ``rounds`` R > 1 the suite alternates

    calibration pass 1, every step · calibration pass 2, every step · … · pass R, every step

and compares the calibration fitted to the median of the R passes (``robust.merge_passes``) with each
step's median over the R rounds: both sides see the same mix of machine states. Round 1 is the suite's
usual single-device run (FLOPs, saved bytes and the per-class diagnosis come from it); later rounds
only re-time. The per-round step times are kept in each case's ``detail.rounds_s``.

Placement modes (``simtrain.calibrate.modes``): every round's step timing is followed by a reading of
the calibration's mode sentinel (``detail.rounds_dispatch_s``). Where the merged passes met two modes,
:func:`modal_cases` fits a profile per mode and one for the mix the passes met, and compares each
mode's profile with the median of the rounds timed in that mode (``step_time_modal``), and the mix's
with the median over all rounds (``step_time_mix``).

DDP the same way (:func:`ddp_rounds`): R times a 1-thread calibration pass (with the gloo
collectives the link is fitted from) then the DDP timings, compared as the merged calibration
against each timing's median over the R rounds (per-round times in ``detail.rounds_s``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from simtrain.calibrate.fit import fit
from simtrain.calibrate.measure import measure
from simtrain.calibrate.modes import PlacementModes, modal_measurements, placement_modes
from simtrain.calibrate.records import Measurements
from simtrain.calibrate.robust import merged_measurements
from validation import ddp, steps
from validation.calibration import Calibrated, refined
from validation.overhead import with_step_overhead
from validation.report import Case
from validation.run_calibration import MeasuredRun
from validation.sentinel import dispatch_sample
from validation.workloads import unseen_workloads, workloads

__all__ = ["round_path", "more_rounds", "ddp_rounds", "median_times", "contention_markdown", "round_spread",
           "spread_markdown", "modal_cases", "modes_markdown"]

_STEP_METRICS = {"step_time": "step_time_plain", "step_time_unseen": "step_time_plain_unseen"}


def round_path(path: Path | None, k: int) -> Path | None:
    """Where round ``k`` (≥ 2)'s calibration pass is saved beside round 1's measurements file."""
    return None if path is None else path.with_name(f"{path.stem}.round{k}.json")


def _pass(cal: Calibrated, k: int, log, collectives: bool = False) -> Measurements:
    path = round_path(cal.path, k)
    if path is not None and path.exists():
        return Measurements.load(path)
    m0 = cal.measurements
    m = measure(m0.machine.device, grid=m0.settings.get("grid"), threads=m0.machine.threads,
                collectives=collectives, log=lambda s: log(f"  {s}"), colocated=m0.settings.get("colocated", 1))
    if path is not None:
        m.save(path)
    return m


def _merged(cal: Calibrated, passes: list[Measurements]) -> Calibrated:
    m = merged_measurements(passes, rounds=len(passes),
                            passes_steal_fraction=[p.settings.get("steal_fraction") for p in passes],
                            passes_other_cpu_fraction=[p.settings.get("other_cpu_fraction") for p in passes])
    c = fit(m)
    return replace(cal, measurements=m, calibration=c, step_device=c.device, overhead=None)


def _retime(cfg, threads: int) -> dict[str, tuple[steps.StepTimes, float]]:
    """Every model's steps timed again, each followed by a reading of the mode sentinel."""
    out = {}
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for w in workloads(cfg.size, cfg.models) + unseen_workloads(cfg.size, cfg.models):
            module, inputs, loss_fn = w.build(cfg.device, 0)
            step = steps.train_step(module, inputs, loss_fn, steps.make_optimizer(w.optimizer, module.parameters(),
                                                                                   cfg.device))
            out[w.case] = steps.time_steps(step, cfg.device, cfg.warmup, cfg.repeats), dispatch_sample(cfg.device)
    finally:
        torch.set_num_threads(saved)
    return out


def more_rounds(cfg, cal: Calibrated, cases: list[Case], runs: list[MeasuredRun],
                log: Callable[[str], None]) -> tuple[Calibrated, list[Case], list[MeasuredRun]]:
    """Rounds 2..``cfg.rounds``; returns the merged calibration and the step cases and runs re-stated
    on it (predictions from the merged profile, measured = the median over rounds)."""
    passes, times = [cal.measurements], {r.case: [r.step_time_s] for r in runs}
    first = {c.case: c.detail for c in cases if c.metric in _STEP_METRICS}
    steal = {case: [first.get(case, {}).get("steal_fraction")] for case in times}
    dispatch = {case: [first.get(case, {}).get("dispatch_after_s")] for case in times}
    fresh = {case: [first.get(case, {}).get("fresh_bytes_mean")] for case in times}
    for k in range(2, cfg.rounds + 1):
        t0 = time.perf_counter()
        log(f"round {k} of {cfg.rounds}: calibration pass")
        passes.append(_pass(cal, k, log))
        for case, (t, d) in _retime(cfg, cal.threads).items():
            times[case].append(t.median_s)
            steal[case].append(t.steal_fraction)
            dispatch[case].append(d)
            fresh[case].append(statistics.fmean(t.fresh_bytes) if t.fresh_bytes else None)
        log(f"round {k}: steps re-timed [{time.perf_counter() - t0:.0f} s]")
    merged = refined(_merged(cal, passes), log)
    by_case = {r.case: r for r in runs}
    out_cases = []
    for c in cases:
        run = by_case.get(c.case)
        if run is None or c.metric not in (*_STEP_METRICS, *_STEP_METRICS.values()):
            out_cases.append(c)
            continue
        device = merged.step_device if c.metric in _STEP_METRICS else merged.device
        predicted = steps.predict_step(run.model, device, run.batch, run.optimizer).step_time_s
        out_cases.append(replace(c, predicted=predicted, measured=statistics.median(times[c.case]),
                                 detail=dict(c.detail, rounds_s=times[c.case], rounds_steal=steal[c.case],
                                             rounds_dispatch_s=dispatch[c.case], rounds_fresh_bytes=fresh[c.case],
                                             device=device.name)))
    out_cases += modal_cases(merged, out_cases, runs, log)
    new_runs = [replace(r, step_time_s=statistics.median(times[r.case])) for r in runs]
    for c in out_cases:
        if c.metric in _STEP_METRICS:
            log(f"{c.case:24s} over {cfg.rounds} rounds: predicted {c.predicted * 1e3:9.2f} ms  measured "
                f"{c.measured * 1e3:9.2f} ms  ({c.error_pct:+.1f} %)  rounds "
                + " ".join(f"{t * 1e3:.1f}" for t in c.detail["rounds_s"]))
    return merged, out_cases, new_runs


_MODAL = {"step_time": ("step_time_modal", "step_time_mix"),
          "step_time_unseen": ("step_time_modal_unseen", "step_time_mix_unseen")}


def _mode_devices(merged: Calibrated, modes: PlacementModes) -> dict[str, object]:
    """The step devices fitted to the merged passes re-centred on the fast mode and on the slow mode
    (``modes.modal_measurements``), each with the merged calibration's in-step cost, and the mix the
    passes met: the merged calibration's own step device (``st.calibrate`` fits that mix already)."""
    out = {"mix": merged.step_device}
    for name, share in (("fast", 0.0), ("slow", 1.0)):
        device = fit(modal_measurements(merged.measurements, modes, share)).device
        out[name] = with_step_overhead(device, merged.overhead) if merged.overhead is not None else device
    return out


def modal_cases(merged: Calibrated, cases: list[Case], runs: list[MeasuredRun],
                log: Callable[[str], None]) -> list[Case]:
    """Per step case (rounds recorded): the mix profile against the median over all rounds, and each
    mode's profile against the median of the rounds whose sentinel reading fell in that mode (module
    docstring); none where the merged passes met one mode only."""
    modes = placement_modes(merged.measurements.rows)
    if modes is None:
        return []
    log(f"placement modes: dispatch call {modes.fast_s * 1e6:.2f} / {modes.slow_s * 1e6:.2f} µs, "
        f"{modes.slow_readings} of {modes.readings} calibration readings slow; fitting a profile per mode")
    devices = _mode_devices(merged, modes)
    by_case = {r.case: r for r in runs}
    out = []
    for c in cases:
        run = by_case.get(c.case)
        if run is None or c.metric not in _MODAL or "rounds_dispatch_s" not in c.detail:
            continue
        modal_metric, mix_metric = _MODAL[c.metric]
        pred = {k: steps.predict_step(run.model, d, run.batch, run.optimizer).step_time_s for k, d in devices.items()}
        out.append(Case(c.case, mix_metric, pred["mix"], c.measured,
                        detail={"slow_share": modes.slow_fraction, "rounds_s": c.detail["rounds_s"]}))
        tagged = [(t, modes.is_slow(d)) for t, d in zip(c.detail["rounds_s"], c.detail["rounds_dispatch_s"], strict=True)
                  if d is not None]
        for name, slow in (("fast", False), ("slow", True)):
            mine = [t for t, s in tagged if s is slow]
            if mine:
                out.append(Case(f"{c.case} {name} mode", modal_metric, pred[name], statistics.median(mine),
                                detail={"mode": name, "rounds": len(mine), "rounds_s": mine}))
    return out


def modes_markdown(cases: list[Case], calibration: dict | None = None) -> list[str]:
    """The placement-mode comparison as a table: per model, the rounds timed in each mode and each
    mode's profile against them (nothing without ``step_time_modal`` cases)."""
    modal = [c for c in cases if c.metric in ("step_time_modal", "step_time_modal_unseen")]
    if not modal:
        return []
    lines = ["Each model's rounds split by the mode sentinel read right after its timing (calibrate/modes.py), "
             "each mode's median against the profile fitted to the calibration passes' groups that ran in that "
             "mode; 'mix' is the profile of the mix the passes met against the median over all rounds.", "",
             "| model | mode | rounds | predicted | measured | error |", "|---|---|---:|---:|---:|---:|"]
    for c in modal:
        model, mode = c.case.rsplit(" ", 2)[0], c.detail["mode"]
        lines.append(f"| {model} | {mode} | {c.detail['rounds']} | {c.predicted * 1e3:.1f} ms | "
                     f"{c.measured * 1e3:.1f} ms | {c.error_pct:+.1f} % |")
    return lines


def median_times(rounds: list[ddp.DdpTimes]) -> ddp.DdpTimes:
    """Each timing of one DDP job as its median over the rounds (sizes and batch from the first)."""
    first = rounds[0]
    med = {f: statistics.median(getattr(t, f) for t in rounds)
           for f in ("overlap_s", "no_overlap_s", "allreduce_s", "alone_s", "concurrent_s")}
    return replace(first, **med)


def ddp_rounds(cfg, cal1: Calibrated, first: list[ddp.DdpTimes], log: Callable[[str], None],
               passes: bool = True) -> tuple[Calibrated, list[ddp.DdpTimes], list[list[ddp.DdpTimes]]]:
    """Rounds 2..``cfg.rounds`` of the DDP part (module docstring): the merged 1-thread calibration
    (``cal1`` itself when ``passes`` is False: it is the main calibration, merged already), each job's
    median timings, and each job's timings per round."""
    calibrations, per_job = ([cal1.measurements] if passes else []), [[t] for t in first]
    for k in range(2, cfg.rounds + 1):
        t0 = time.perf_counter()
        if passes:
            log(f"DDP round {k} of {cfg.rounds}: 1-thread calibration pass")
            calibrations.append(_pass(cal1, k, log, collectives=True))
        for job, t in zip(per_job, ddp.measure_ddp(list(cfg.ddp_jobs), cfg.warmup, cfg.ddp_repeats), strict=True):
            job.append(t)
        log(f"DDP round {k}: re-timed [{time.perf_counter() - t0:.0f} s]")
    merged = refined(_merged(cal1, calibrations), log) if passes else cal1
    return merged, [median_times(job) for job in per_job], per_job


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def contention_markdown(cases: list[Case], calibration: dict | None) -> list[str]:
    """Per round: how busy the machine was during its calibration pass and during its step timings
    (CPU steal, other processes' share of the cores: ``robust.contention_between``), and how the
    round's steps compare with the final predictions — whether a slow round is a loaded one."""
    steps_ = [c for c in cases if c.metric in _STEP_METRICS and c.predicted > 0]
    if not steps_ or calibration is None:
        return []
    rounds_s = [c.detail.get("rounds_s", [c.measured]) for c in steps_]
    rounds_steal = [c.detail.get("rounds_steal", [c.detail.get("steal_fraction")]) for c in steps_]
    n = min(len(r) for r in rounds_s)
    pass_steal = list(calibration.get("passes_steal_fraction") or [])
    pass_other = list(calibration.get("passes_other_cpu_fraction") or [])
    lines = ["Per round: CPU steal (the hypervisor's share of the machine's time) and other processes' share of "
             "the cores during its calibration pass and during its step timings (median over the models, "
             "their range in brackets), and the round's measured steps over the final predictions (median "
             "over the models). In round 1 the steps' share of 'other' includes nothing of this process.", "",
             "| round | pass: steal | pass: other CPU | steps: steal | steps measured ÷ predicted |",
             "|---:|---:|---:|---:|---:|"]
    for k in range(n):
        st_k = [r[k] for r in rounds_steal if len(r) > k and r[k] is not None]
        spread = f" ({_pct(min(st_k))}–{_pct(max(st_k))})" if st_k else ""
        ratio = statistics.median(r[k] / c.predicted for r, c in zip(rounds_s, steps_, strict=True))
        lines.append(f"| {k + 1} | {_pct(pass_steal[k] if k < len(pass_steal) else None)} "
                     f"| {_pct(pass_other[k] if k < len(pass_other) else None)} "
                     f"| {_pct(statistics.median(st_k) if st_k else None)}{spread} | {ratio:.3f} |")
    return lines


def round_spread(cases: list[Case]) -> dict[str, float] | None:
    """How far the measured steps themselves moved between rounds: per model, ``spread`` = (slowest −
    quickest round) ÷ quickest and ``step`` = the largest change between consecutive rounds (÷ the
    earlier), each as the median over the models (and the range of ``spread``); None with fewer than two
    rounds. A prediction cannot be checked against a second calibration more finely than the steps it
    predicts hold still between the two."""
    per = [c.detail["rounds_s"] for c in cases
           if c.metric in _STEP_METRICS and len(c.detail.get("rounds_s") or ()) > 1]
    if not per:
        return None
    spread = [max(r) / min(r) - 1.0 for r in per]
    step = [max(abs(b / a - 1.0) for a, b in zip(r[:-1], r[1:], strict=True)) for r in per]
    return {"models": len(per), "rounds": min(len(r) for r in per), "spread_median": statistics.median(spread),
            "spread_min": min(spread), "spread_max": max(spread), "step_median": statistics.median(step)}


def spread_markdown(cases: list[Case]) -> list[str]:
    """:func:`round_spread` as a paragraph for the report (nothing with fewer than two rounds)."""
    s = round_spread(cases)
    if s is None:
        return []
    return ["", f"The measured steps' own spread over the rounds ({s['models']} models): slowest round over "
            f"quickest {_pct(s['spread_median'])} (median over the models; {_pct(s['spread_min'])} to "
            f"{_pct(s['spread_max'])}), and the largest change between consecutive rounds "
            f"{_pct(s['step_median'])} (median). The same step moves this much between rounds minutes apart "
            "on this machine, so two calibrations taken minutes apart can agree no more closely than this "
            "when each predicts the steps of its own time."]
