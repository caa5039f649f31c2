"""The validation suite: calibrate this machine from microbenchmarks, run real PyTorch training, compare
with simtrain's predictions, write ``<machine>.{json,md,png}``.

    python -m validation [--quick] [--device cpu|cuda] [--out DIR] [--measurements PATH]
    simtrain validate    (the same options)

Order of a run (each part adds :class:`~validation.report.Case` rows):

1. calibration (:mod:`validation.calibration`): ``st.measure`` → ``st.calibrate``; the zoo's own step
   times never enter the fit;
2. single-device steps of every zoo model (:mod:`validation.steps`): step time, FLOPs vs
   FlopCounterMode, saved bytes vs saved-tensor hooks, peak memory on CUDA;
3. DDP over gloo, 2 processes of 1 thread (:mod:`validation.ddp`; CPU runs only);
4. the DataLoader pipeline (:mod:`validation.pipeline`).

``quick`` (CI): the zoo's tiny sizes, 2 repeats, the ``tiny`` measurement grid at 1 thread (one
calibration for steps and DDP), two DDP models, one loader setting. ``full``: the medium sizes
(:mod:`validation.workloads`), 15 repeats, the ``full`` grid at torch's thread count plus a 1-thread
grid for DDP, four DDP models, every loader setting. On CUDA the sizes are the zoo's ``standard``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from simtrain.calibrate.fit import profile_link
from simtrain.calibrate.machine import machine_slug
from validation import ddp, pipeline, rounds, run_calibration, steps
from validation.calibration import Calibrated, calibrated, one_thread_path, refined
from validation.diagnose import class_markdown
from validation.outdir import cached_measurements_path, default_out_dir
from validation.report import Case, summarise, write_all
from validation.sentinel import drift, speed_sample, wait_for_speed
from validation.workloads import unseen_workloads, workloads

__all__ = ["SuiteConfig", "SuiteResult", "run_suite", "rerender", "quick_config", "full_config", "TARGETS",
           "DEFAULT_OUT"]

DEFAULT_OUT = None
"""``SuiteConfig.out_dir`` default: resolved at run time by :func:`validation.outdir.default_out_dir`
(never the source tree; the committed results are ``validation.outdir.COMMITTED_RESULTS``)."""

TARGETS = {"step_time": "MAPE ≤ 10 % (stretch ≤ 5 %)", "step_time_unseen": "MAPE ≤ 10 %", "flops": "exact", "saved_bytes": "within 1 %",
           "ddp_step": "within 15 %"}


@dataclass(frozen=True)
class SuiteConfig:
    mode: str
    device: str = "cpu"
    out_dir: Path | None = DEFAULT_OUT
    measurements: Path | None = None
    size: str = "small"
    grid: str = "tiny"
    threads: int = 1
    warmup: int = 2
    repeats: int = 2
    models: tuple[str, ...] | None = None
    ddp_jobs: tuple[tuple[str, str, int], ...] = ()
    ddp_repeats: int = 2
    loader_cases: tuple = pipeline.CASES[:3]
    loader_batches: int = 8
    wait_for_speed_s: float = 0.0
    """Before each model, wait up to this long for the sentinel to return to calibration speed."""
    diagnose: bool = False
    """Profile each model's step and compare per op class (validation/diagnose.py)."""
    rounds: int = 1
    """Alternate calibration passes and step timings this many times and compare medians
    (validation/rounds.py): both sides then sample the same drifting machine."""
    command: str = ""
    extra_notes: tuple[str, ...] = field(default_factory=tuple)


def quick_config(**over) -> SuiteConfig:
    base = SuiteConfig(mode="quick", ddp_jobs=(("mlp", "small", 8), ("gpt", "small", 4)))
    return replace(base, **over)


def full_config(**over) -> SuiteConfig:
    device = over.get("device", "cpu")
    base = SuiteConfig(mode="full", size="standard" if device == "cuda" else "medium", grid="full",
                       threads=torch.get_num_threads(), warmup=3, repeats=15,
                       ddp_jobs=(("mlp", "medium", 64), ("cnn_bn", "medium", 16), ("resnet18", "medium", 4),
                                 ("gpt", "medium", 4)),
                       ddp_repeats=10, loader_cases=pipeline.CASES, loader_batches=30, diagnose=True,
                       wait_for_speed_s=180.0, rounds=3)
    if device == "cuda":  # a dedicated GPU: no tenants to wait out or to average over in rounds
        base = replace(base, wait_for_speed_s=0.0, rounds=1)
    return replace(base, **over)


@dataclass(frozen=True)
class SuiteResult:
    cases: tuple[Case, ...]
    meta: dict
    paths: dict[str, Path]
    slug: str


def _log_default(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _measurements_path(cfg: SuiteConfig) -> Path | None:
    return cfg.measurements or cached_measurements_path(cfg.out_dir, cfg.device, cfg.grid, cfg.threads)


def _calibrations(cfg: SuiteConfig, log) -> Calibrated:
    """The step-time calibration (the 1-thread one for DDP comes later: :func:`_ddp_calibration`)."""
    return calibrated(cfg.device, cfg.grid, cfg.threads, _measurements_path(cfg), log, refine=False,
                      quiet_wait_s=cfg.wait_for_speed_s)


def _ddp_calibration(cfg: SuiteConfig, main: Calibrated, log) -> Calibrated | None:
    """The 1-thread calibration DDP is predicted from, measured when called (right before the DDP
    timing: this VM's speed drifts over minutes, and the step rounds take ten) with the other ranks'
    neighbours running (``st.measure(colocated=…)``: each rank's device is a core whose neighbours
    are busy); None when DDP does not run."""
    if not cfg.ddp_jobs or cfg.device != "cpu":
        return None
    path = _measurements_path(cfg)
    return calibrated("cpu", cfg.grid, 1, one_thread_path(path) if path else None, log, refine=False,
                      colocated=ddp.colocated_ranks())


def _diagnose(w, res, cal: Calibrated, device: str) -> list[dict]:
    from validation import diagnose
    module, inputs, loss_fn = w.build(device, seed=0)
    step = steps.train_step(module, inputs, loss_fn, steps.make_optimizer(w.optimizer, module.parameters(), device))
    measured, wall = diagnose.measured_by_class(step)
    predicted = diagnose.predicted_by_class(res.model, cal.step_device, w.batch, res.report)
    return diagnose.class_table(predicted, measured, wall)


def _validated(w, cfg: SuiteConfig, cal: Calibrated, log, failed: list[str]):
    """``steps.validate_workload`` for one model, or None when it raised: the suite goes on with the
    other models and the report names the failure, appended to ``failed`` as ``case: error`` (a device
    nobody ran the suite on yet may refuse an op one model needs)."""
    try:
        return steps.validate_workload(w, cal.step_device, cfg.device, cfg.warmup, cfg.repeats, cal.threads,
                                       plain_spec=cal.device)
    except Exception as e:  # noqa: BLE001 - recorded and reported, never swallowed silently
        failed.append(f"{w.case}: {type(e).__name__}: {e}")
        log(f"{w.case:24s} FAILED ({type(e).__name__}: {e}); going on with the other models")
        return None


def _single_device(cfg: SuiteConfig, cal: Calibrated, log, failed: list[str]) -> tuple[list[Case], dict, list]:
    """Step / FLOPs / saved-bytes (/ peak memory) cases, the per-class diagnosis by case, and the
    measured steps as calibration runs (validation/run_calibration.py)."""
    cases, diag, runs = [], {}, []
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(cal.threads)
    if cfg.device == "cuda":  # precision="fp32" is predicted: run true fp32, not TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        for w in workloads(cfg.size, cfg.models) + unseen_workloads(cfg.size, cfg.models):
            before = wait_for_speed(cal.sentinel, cfg.device, max_wait_s=cfg.wait_for_speed_s)
            t0 = time.perf_counter()
            res = _validated(w, cfg, cal, log, failed)
            if res is None:
                continue
            sample = speed_sample(cfg.device)
            speed = drift(sample, cal.sentinel)
            cases += [replace(c, detail=dict(c.detail, machine_speed_vs_calibration=speed,
                                             machine_speed_before=before, dispatch_after_s=sample["dispatch_s"]))
                      if c.metric in ("step_time", "step_time_unseen") else c for c in res.cases]
            if cfg.diagnose and cfg.device == "cpu":
                diag[w.case] = _diagnose(w, res, cal, cfg.device)
            step = res.cases[0]
            runs.append(run_calibration.MeasuredRun(w.case, res.model, w.batch, w.optimizer, step.measured, w.unseen))
            log(f"{w.case:24s} step predicted {step.predicted * 1e3:9.2f} ms  measured "
                f"{step.measured * 1e3:9.2f} ms  ({step.error_pct:+.1f} %)  [{time.perf_counter() - t0:.1f} s]")
    finally:
        torch.set_num_threads(saved_threads)
    return cases, diag, runs


def _run_cases(runs, cal: Calibrated, log) -> list[Case]:
    got = run_calibration.run_cases(runs, cal.step_device)
    if got:
        log(f"runs as calibration input: {len(got)} cases (zoo → unseen, leave-one-out)")
    return got


def _timing_of(case: Case, t) -> float:
    """The timing of one round's DdpTimes a DDP case compares with."""
    if case.metric == "allreduce":
        return t.allreduce_s
    return t.no_overlap_s if case.case.endswith("no_overlap") else t.overlap_s


def _ddp(cfg: SuiteConfig, cal1: Calibrated, log, own_passes: bool) -> tuple[Calibrated, list[Case]]:
    """DDP cases over ``cfg.rounds`` rounds (validation/rounds.py ``ddp_rounds``), predicted from the
    1-thread calibration merged over them (``own_passes``: ``cal1`` is its own 1-thread calibration,
    not the main one, and takes a pass per round). Returns that calibration and the cases."""
    import simtrain as st
    log(f"DDP (gloo, {ddp.WORLD} processes × 1 thread): {', '.join(n for n, _, _ in cfg.ddp_jobs)}")
    times = ddp.measure_ddp(list(cfg.ddp_jobs), cfg.warmup, cfg.ddp_repeats)
    per_round = [[t] for t in times]
    if cfg.rounds > 1:
        cal1, times, per_round = rounds.ddp_rounds(cfg, cal1, times, log, passes=own_passes)
    cluster = ddp.dp_cluster(cal1.step_device, profile_link(cal1.device, "gloo"), os.cpu_count() or 1)
    cases = []
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for (name, size, batch), t, job in zip(cfg.ddp_jobs, times, per_round, strict=True):
            w = workloads(size, (name,))[0]
            module, inputs, loss_fn = w.build("cpu", seed=0, batch=batch)
            model = st.Model.from_torch(module, inputs, loss_fn, name=name)
            got = [replace(c, detail=dict(c.detail, rounds_s=[_timing_of(c, r) for r in job]))
                   for c in ddp.ddp_cases(w, model, cluster, t)]
            cases += got
            log("  " + "; ".join(f"{c.case.split(' ', 2)[-1]} {c.error_pct:+.1f} %" for c in got))
    finally:
        torch.set_num_threads(saved_threads)
    return cal1, cases


_DRIFT_PREFIX = "machine-speed sentinel"


def _drift_note(cases: list[Case]) -> str | None:
    by: dict[str, list[float]] = {}
    for c in cases:
        if c.metric in ("step_time", "step_time_unseen"):
            for k, r in c.detail.get("machine_speed_vs_calibration", {}).items():
                by.setdefault(k, []).append(r)
    if not by:
        return None
    ranges = "; ".join(f"{k.removesuffix('_s')} {min(v):.2f}× to {max(v):.2f}×" for k, v in sorted(by.items()))
    return (f"{_DRIFT_PREFIX} (validation/sentinel.py) right after each model's step timing, relative to right "
            f"after the calibration: {ranges} (1.00 = same speed; > 1 slower; not used to correct anything).")


def _sections(cases: list[Case], diagnosis: dict | None, calibration: dict | None = None) -> list[tuple[str, list[str]]]:
    """The report's sections after the summary, each where its cases exist (``calibration``: the
    report's calibration facts, for the machine's load during each pass)."""
    sections = [("Step time by op class", class_markdown(diagnosis))] if diagnosis else []
    if load := rounds.contention_markdown(cases, calibration):
        sections.append(("Machine load by round", load + rounds.spread_markdown(cases)))
    if modal := rounds.modes_markdown(cases):
        sections.append(("Placement modes", modal))
    if faults := steps.fresh_pages_markdown(cases):
        sections.append(("Allocator faults", faults))
    if runs := run_calibration.run_section(cases):
        sections.append(("Measured runs as calibration input", runs))
    if any(c.metric == "ddp_step" for c in cases):
        sections.append(("DDP step: where the time goes", ddp.attribution_markdown(cases)))
    return sections


def rerender(json_path: Path) -> dict[str, Path]:
    """Rewrite ``<machine>.md`` and ``.png`` from a report JSON (the drift note recomputed)."""
    from validation.report import load_cases, write_markdown, write_plot
    json_path = Path(json_path)
    cases, meta = load_cases(json_path)
    notes = [n for n in meta.get("notes", []) if not n.startswith(_DRIFT_PREFIX)]
    note = _drift_note(cases)
    notes.insert(1, note) if note else None
    sections = _sections(cases, meta.get("diagnosis_by_class"), meta.get("calibration"))
    slug = meta["machine_slug"]
    return {"md": write_markdown(json_path.with_suffix(".md"), cases, meta, notes, TARGETS, sections),
            "png": write_plot(json_path.with_suffix(".png"), cases, f"simtrain validation — {slug}")}


def _notes(cfg: SuiteConfig, cases: list[Case], cal: Calibrated, failed: list[str]) -> list[str]:
    notes = list(cfg.extra_notes)
    if failed:
        notes.append("models that failed and are not in the report: " + "; ".join(failed))
    if cfg.rounds > 1:
        notes.append(f"{cfg.rounds} rounds (validation/rounds.py): calibration passes alternated with step timings; "
                     "step predictions come from the profile fitted to the passes merged (the trimmed mean of their medians, "
                     "re-centred on the placement-mode mix the passes met where they met two: calibrate/modes.py), measured step "
                     "times are the median over rounds (per-round times in detail.rounds_s); FLOPs, saved bytes "
                     "and the per-class table are from round 1.")
    if cal.overhead is not None:
        o = cal.overhead
        notes.append(f"step-time device = st.calibrate's device + {o.per_launch_s * 1e6:.2f} µs per op launch, the "
                     "framework's in-step per-op cost measured on a synthetic chain of tiny layers "
                     f"(validation/overhead.py; per-step fixed cost {o.per_step_s * 1e6:.0f} µs measured, "
                     f"{o.step_host_s * 1e6:.0f} µs charged as Efficiency.step_host_overhead_s). The prediction "
                     "from st.calibrate alone is in the JSON "
                     "(detail.predicted_plain_calibration_s).")
    note = _drift_note(cases)
    if note:
        notes.append(note)
    if cfg.device == "cpu":
        notes.append("peak_memory is not compared on CPU (torch.cuda.max_memory_allocated exists only on GPUs).")
        notes.append("DDP: gloo over loopback, 2 processes × 1 thread on this machine's cores; predicted "
                     "from a 1-thread calibration measured with a neighbour process running the same benches on the "
                     "other core (st.measure colocated=2: the ranks share the host; its lockstep ranks give the "
                     "wait for the slower rank, rank_jitter_sigma) and the calibrated gloo link on "
                     "a plain switch fabric"
                     + (f"; {cfg.rounds} rounds of a 1-thread calibration pass and the DDP timings, the "
                        "calibration merged over them and each timing's median compared (per-round times in "
                        "detail.rounds_s)." if cfg.rounds > 1 else "."))
    else:
        notes.append("DDP is not run on CUDA by this suite (one GPU per machine here; NCCL needs two).")
    if any(c.detail.get("grouped_conv_excess") for c in cases if c.metric == "flops"):
        notes.append("FLOPs: the counter's weight-gradient FLOPs of grouped convolutions are multiplied by "
                     "groups (docs/flop-counter-disagreements.md); 'measured' is the counter less exactly that "
                     "excess, the raw count is in the JSON (detail.counter_raw).")
    notes.append("FLOPs: the CPU flash-attention kernels are counted with FlopCounterMode's own SDPA formulas "
                 "(the stock counter has none for them and says 0).")
    notes.append("pipeline_stall: error is relative to the measured iteration time (a stall near zero has no "
                 "useful relative error).")
    return notes


def _meta(cfg: SuiteConfig, cal: Calibrated, cal1: Calibrated | None, runtime_s: float, load: tuple) -> dict:
    facts = cal.measurements.machine.to_dict()
    facts.pop("cpu_flags", None)
    return {"mode": cfg.mode, "device": cfg.device, "command": cfg.command, "runtime_s": runtime_s,
            "machine": facts, "calibration": cal.facts(), "calibration_1thread": cal1.facts() if cal1 else None,
            "settings": {"size": cfg.size, "grid": cfg.grid, "warmup": cfg.warmup, "repeats": cfg.repeats,
                         "ddp_jobs": [list(j) for j in cfg.ddp_jobs], "ddp_repeats": cfg.ddp_repeats,
                         "loader_batches": cfg.loader_batches, "models": list(cfg.models or ())},
            "loadavg_1min": {"start": load[0], "end": load[1]}, "torch": torch.__version__}


def _loadavg() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def run_suite(cfg: SuiteConfig, log: Callable[[str], None] = _log_default) -> SuiteResult:
    """Run every part of the suite under ``cfg`` and write the report files to ``cfg.out_dir``."""
    start, load0 = time.perf_counter(), _loadavg()
    out_dir = default_out_dir() if cfg.out_dir is None else Path(cfg.out_dir)
    cfg = replace(cfg, out_dir=out_dir, command=cfg.command or shlex.join(sys.argv))
    cal = refined(_calibrations(cfg, log), log)  # in-step per-op cost, measured right before the steps
    failed: list[str] = []
    cases, diag, runs = _single_device(cfg, cal, log, failed)
    if cfg.rounds > 1:
        cal, cases, runs = rounds.more_rounds(cfg, cal, cases, runs, log)
    cases += _run_cases(runs, cal, log)
    cal1 = _ddp_calibration(cfg, cal, log)
    if cal1 is not None:
        own = cal1.measurements is not cal.measurements
        cal1, got = _ddp(cfg, refined(cal1, log) if own else cal, log, own)
        cases += got
    log(f"DataLoader: {len(cfg.loader_cases)} settings × {cfg.loader_batches} batches")
    cases += pipeline.pipeline_cases(cfg.loader_batches, cfg.loader_cases)
    handoff = {w: pipeline.handoff_s(w, cfg.loader_batches) for w in (1, 2)}
    slug = machine_slug(cal.measurements.machine)
    meta = _meta(cfg, cal, cal1, time.perf_counter() - start, (load0, _loadavg()))
    meta["diagnosis_by_class"] = diag
    meta["loader_handoff_s"] = handoff
    sections = _sections(cases, diag, meta["calibration"])
    notes = _notes(cfg, cases, cal, failed) + [
        "DataLoader hand-off per batch with a zero-cost transform and no compute (not in the closed form): "
        + ", ".join(f"{w} worker{'s' if w > 1 else ''} {t * 1e3:.2f} ms" for w, t in handoff.items()) + "."]
    paths = write_all(cfg.out_dir, slug, cases, meta, notes, TARGETS, sections)
    for m, s in summarise(cases).items():
        log(f"{m:20s} n={s.count:2d}  MAPE {s.mape_pct:7.2f} %  worst {s.worst_error_pct:+8.2f} %  ({s.worst_case})")
    log("wrote " + ", ".join(str(p) for p in paths.values()))
    return SuiteResult(tuple(cases), meta, paths, slug)
