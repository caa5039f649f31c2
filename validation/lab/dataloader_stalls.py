"""Measured DataLoader stalls on this machine against the simulator and the closed form (issue 13).

A real ``torch.utils.data.DataLoader`` over a synthetic dataset whose ``__getitem__`` sleeps a known
transform time per sample, feeding a training loop whose step sleeps a known compute time. Sleeps,
not arithmetic, so the result does not depend on how busy the (shared, 2-core) CPU is: the thing
under test is the loader's scheduling — workers, prefetch depth, the queue — which is what the
simulator models. Grid: num_workers {0, 1, 2, 4} × prefetch_factor {1, 2} (no prefetch without
workers) × transform-per-batch / compute ratio {0.25, 1, 4}.

Per case: ``t_i`` = when the loop receives batch i; step i lasts ``t_{i+1} − t_i``; its stall is that
minus the compute the step actually slept. The first ``num_workers · prefetch_factor + 2`` steps are
excluded (worker start-up, the first batch, the queue filling or draining); the rest are averaged.
The sleeps' real lengths are measured too (each sample reports how long its transform slept, each
step how long it computed), and the predictions use those measured stage times, so sleep overshoot is
not blamed on the pipeline model.

Predictions: the simulator's DataLoader process (:func:`simtrain.sim.dataloader.simulate_data_loader`,
what ``st.simulate`` runs for ``TrainConfig.data``), averaged over the same step window of a run of the
same length, and the closed form (:func:`simtrain.cost.data_pipeline.pipeline_times`, steady state).

    python -m validation.lab.dataloader_stalls [--steps 24] [--out validation/results/dataloader-stalls.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Case", "Measured", "Row", "grid", "measure_case", "predict", "handoff_s", "summarise", "markdown", "main"]

RESULTS = Path(__file__).resolve().parents[1] / "results"  # validation/results (this file is in validation/lab/)
RATIOS = (0.25, 1.0, 4.0)
WORKERS = (0, 1, 2, 4)
PREFETCH = (1, 2)


@dataclass(frozen=True)
class Case:
    workers: int
    prefetch_factor: int | None
    """None without workers (the DataLoader refuses a prefetch factor then)."""
    ratio: float
    """Transform time of one batch (one worker) over the step's compute time."""
    compute_s: float
    batch: int

    @property
    def transform_per_sample_s(self) -> float:
        return self.ratio * self.compute_s / self.batch

    @property
    def warmup(self) -> int:
        return self.workers * (self.prefetch_factor or 0) + 2

    @property
    def label(self) -> str:
        pf = "-" if self.prefetch_factor is None else str(self.prefetch_factor)
        return f"w{self.workers} pf{pf} r{self.ratio:g}"


@dataclass(frozen=True)
class Measured:
    stall_s: float
    """Mean stall per step over the window."""
    step_s: float
    compute_s: float
    """Mean slept compute per step (what the predictions take as the compute)."""
    transform_per_sample_s: float
    """Mean slept transform per sample."""
    steps: int


@dataclass(frozen=True)
class Row:
    case: Case
    measured: Measured
    sim_stall_s: float
    closed_stall_s: float
    sim_handoff_stall_s: float | None = None
    """The simulator's stall with the hand-off measured apart (validation/pipeline.py handoff_s)."""
    closed_handoff_stall_s: float | None = None

    def error(self, which: str) -> float:
        """Relative error of the predicted step time (compute + stall): predicted / measured − 1."""
        return (self.measured.compute_s + self._stall(which)) / self.measured.step_s - 1.0

    def _stall(self, which: str) -> float:
        return {"sim": self.sim_stall_s, "closed": self.closed_stall_s, "sim+measured": self.sim_handoff_stall_s,
                "closed+measured": self.closed_handoff_stall_s}[which]

    def stall_error_s(self, which: str) -> float:
        return self._stall(which) - self.measured.stall_s


def grid(compute_s: float = 0.02, batch: int = 4) -> list[Case]:
    out = []
    for ratio in RATIOS:
        for w in WORKERS:
            for pf in ((None,) if w == 0 else PREFETCH):
                out.append(Case(w, pf, ratio, compute_s, batch))
    return out


# --- measurement -------------------------------------------------------------------------------

class SleepDataset:
    """``__getitem__`` sleeps the transform time and returns how long it actually slept."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch
        start = time.perf_counter()
        time.sleep(self.seconds)
        return torch.tensor(time.perf_counter() - start, dtype=torch.float64)


def measure_case(case: Case, steps: int) -> Measured:
    """Run the loader for warm-up + ``steps`` + 1 steps; the stall over the window (module docstring)."""
    from torch.utils.data import DataLoader
    total = case.warmup + steps + 1
    ds = SleepDataset(total * case.batch, case.transform_per_sample_s)
    kw = {} if case.workers == 0 else {"prefetch_factor": case.prefetch_factor}
    loader = DataLoader(ds, batch_size=case.batch, num_workers=case.workers, shuffle=False, **kw)
    received, computed, slept = [], [], []
    for batch in loader:
        received.append(time.perf_counter())
        slept.append(float(batch.mean()))
        start = time.perf_counter()
        time.sleep(case.compute_s)
        computed.append(time.perf_counter() - start)
    w = range(case.warmup, len(received) - 1)
    step = [received[i + 1] - received[i] for i in w]
    stall = [received[i + 1] - received[i] - computed[i] for i in w]
    return Measured(statistics.fmean(stall), statistics.fmean(step), statistics.fmean(computed[i] for i in w),
                    statistics.fmean(slept), len(step))


# --- prediction --------------------------------------------------------------------------------

def predict(case: Case, m: Measured, handoff_s_per_batch: float = 0.0) -> tuple[float, float]:
    """(simulated stall, closed-form stall) per step with the measured stage times and, when given,
    the loop's per-batch hand-off measured apart (a component measurement, not fitted on these cases)."""
    from simtrain.cost.data_pipeline import pipeline_times
    from simtrain.sim.dataloader import simulate_data_loader
    from simtrain.specs.train import DataPipeline
    data = DataPipeline(transform_s_per_sample=m.transform_per_sample_s, num_workers=case.workers,
                        prefetch_factor=case.prefetch_factor or 2, handoff_s_per_batch=handoff_s_per_batch)
    closed = pipeline_times(data, case.batch, m.compute_s).stall_s
    run = simulate_data_loader(data, case.batch, m.compute_s, steps=case.warmup + m.steps + 1)
    starts = run.starts_s
    # max(0, ·): a simulated step never lasts less than its compute (float rounding of the differences)
    window = [max(0.0, starts[i + 1] - starts[i] - m.compute_s) for i in range(case.warmup, len(starts) - 1)]
    return statistics.fmean(window), closed


# --- report ------------------------------------------------------------------------------------

def handoff_s(rows: list[Row]) -> dict[bool, float]:
    """The loader's per-batch overhead neither engine models, read off the measurements (in-sample):
    with workers, the median measured stall of the cases both engines predict none (the batch's
    trip through the worker queue: pickling, shared memory, waking the loop); without workers, the
    median excess over the prediction (collation, the sampler, Python between __getitem__ calls)."""
    with_w = [r.measured.stall_s for r in rows if r.case.workers and r.closed_stall_s < 1e-4]
    without = [r.measured.stall_s - r.closed_stall_s for r in rows if not r.case.workers]
    return {True: statistics.median(with_w) if with_w else 0.0, False: statistics.median(without) if without else 0.0}


def _errors(rows: list[Row], which: str, extra: dict[bool, float] | None = None) -> dict[str, float]:
    errs, stall = [], []
    for r in rows:
        add = extra[bool(r.case.workers)] if extra else 0.0
        errs.append(abs(r.error(which) + add / r.measured.step_s))
        stall.append(abs(r.stall_error_s(which) + add))
    return {"mape_pct": 100 * statistics.fmean(errs), "max_pct": 100 * max(errs),
            "stall_mae_ms": 1e3 * statistics.fmean(stall), "stall_max_ms": 1e3 * max(stall)}


def summarise(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Per engine: step-time MAPE and max |error| (%), mean and max |stall error| (ms); and the
    closed form plus the measured per-batch hand-off (in-sample: how much of the error it is)."""
    out = {"sim": _errors(rows, "sim"), "closed": _errors(rows, "closed"),
           "closed+handoff": _errors(rows, "closed", handoff_s(rows))}
    if all(r.sim_handoff_stall_s is not None for r in rows):
        out["sim+measured"] = _errors(rows, "sim+measured")
        out["closed+measured"] = _errors(rows, "closed+measured")
    return out


def markdown(rows: list[Row], load: tuple[float, float], note: str = "") -> str:
    s = summarise(rows)
    c = rows[0].case
    lines = ["# DataLoader stalls: measured vs simulated vs closed form (issue 13)", "",
             f"Machine: {os.cpu_count()} CPU cores; load average {load[0]:.2f} before, {load[1]:.2f} after "
             "(shared with other sessions; the transforms and the compute are sleeps, so CPU contention "
             "moves only the loader's own overhead: IPC, collation, process wake-ups).",
             f"Batch {c.batch} samples; compute {1e3 * c.compute_s:.0f} ms per step (a sleep); transform per batch = "
             "ratio × compute (a sleep per sample in __getitem__). Warm-up excluded: the first "
             "num_workers · prefetch_factor + 2 steps (worker start-up, first batch, queue fill). "
             f"{rows[0].measured.steps} steps measured per case. {note}".rstrip(), "",
             "| case | compute ms | transform ms/batch | measured stall ms | simulated ms | closed form ms | "
             "step err sim | step err closed |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = r.measured
        lines.append(f"| {r.case.label} | {1e3 * m.compute_s:.2f} | {1e3 * m.transform_per_sample_s * r.case.batch:.2f} | "
                     f"{1e3 * m.stall_s:.2f} | {1e3 * r.sim_stall_s:.2f} | {1e3 * r.closed_stall_s:.2f} | "
                     f"{100 * r.error('sim'):+.1f} % | {100 * r.error('closed'):+.1f} % |")
    lines += ["", "| engine | step-time MAPE | max abs step error | mean abs stall error | max abs stall error |",
              "|---|---:|---:|---:|---:|"]
    h = handoff_s(rows)
    engines = [("sim", "simulator (simulate_data_loader)"), ("closed", "closed form (pipeline_times)")]
    if "sim+measured" in s:
        engines += [("sim+measured", "simulator + hand-off measured apart (`handoff_s_per_batch`)"),
                    ("closed+measured", "closed form + hand-off measured apart (`handoff_s_per_batch`)")]
    engines.append(("closed+handoff", f"closed form + hand-off {1e3 * h[True]:.2f} / {1e3 * h[False]:.2f} ms "
                                      "(with / without workers; fitted here, in-sample: for comparison)"))
    for which, name in engines:
        v = s[which]
        lines.append(f"| {name} | {v['mape_pct']:.1f} % | {v['max_pct']:.1f} % | {v['stall_mae_ms']:.2f} ms | "
                     f"{v['stall_max_ms']:.2f} ms |")
    return "\n".join(lines + ["", *_READING]) + "\n"


_READING = [
    "Reading:",
    "- In steady state the simulator's DataLoader process and the closed form are the same model "
    "(sim/dataloader.py says so and this grid confirms it case by case): one batch per max(fetch, fetch/W + "
    "transform, copy, compute) with workers, the plain sum without. Both get which regime a case is in "
    "right — hidden (W workers keep up), worker-bound (stall = transform/W − compute) or serial (stall = "
    "transform) — and the stall's size within a few ms.",
    "- The error both share without it is the per-batch hand-off: with workers the batch's trip "
    "through the worker result queue (pickling into shared memory, waking the loop), without workers "
    "the collation and Python around each `__getitem__`. On this busy 2-core machine it is ~1–2 ms per "
    "batch; it makes every 'no stall' prediction short by that much and dominates the step-time error "
    "at this 20 ms step (it would be negligible at a 200 ms GPU step). The last row shows what adding "
    "it does (fitted on these same cases, so in-sample). Both engines now take it as an input, "
    "`DataPipeline.handoff_s_per_batch`, on the loop's critical path; the rows 'hand-off measured apart' "
    "use the per-batch time of a loader whose transform and compute cost nothing "
    "(validation/pipeline.py `handoff_s`), measured before the grid: out of sample.",
    "- DDP overlap is in the suite's report (validation/results/amd-epyc-2c.md, 'DDP step'): both "
    "engines' predictions beside the measured steps.",
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24, help="measured steps per case (after warm-up)")
    p.add_argument("--compute-ms", type=float, default=20.0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--out", type=Path, default=RESULTS / "dataloader-stalls.md")
    args = p.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")  # 4 workers on 2 cores: intended
    load0, start, rows = os.getloadavg()[0], time.perf_counter(), []
    from validation.pipeline import handoff_s as measure_handoff
    cases = grid(args.compute_ms / 1e3, args.batch)
    handoff = {w: measure_handoff(w, batches=40, batch=args.batch) for w in sorted({c.workers for c in cases})}
    print("hand-off per batch, measured apart: " + ", ".join(f"{w} workers {1e3 * t:.2f} ms" for w, t in handoff.items()))
    for case in cases:
        m = measure_case(case, args.steps)
        sim, closed = predict(case, m)
        sim_h, closed_h = predict(case, m, handoff[case.workers])
        rows.append(Row(case, m, sim, closed, sim_h, closed_h))
        print(f"{case.label:<14} measured {1e3 * m.stall_s:7.2f} ms  sim {1e3 * sim:7.2f}  closed {1e3 * closed:7.2f}",
              flush=True)
    text = markdown(rows, (load0, os.getloadavg()[0]), f"Run took {time.perf_counter() - start:.0f} s.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
