"""Do two calibrations of this machine, run back to back, predict the same step times? (issue 12)

    python -m validation.repeatability [--out DIR] [--measurements A.json B.json] [--grid full]

Measures the microbenchmark grid twice in a row (``st.measure``; or loads two saved sets), fits each
(``st.calibrate``), and predicts the step time of every zoo and unseen model with both profiles. The
spread between the two predictions is what a user re-running ``simtrain calibrate`` would see: the
target is every model within 5 %. Nothing is trained here; the profiles are compared with each
other, not with measured steps (``python -m validation`` does that).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import time
from pathlib import Path

import torch

import simtrain as st
from simtrain.calibrate.fit import fit
from simtrain.calibrate.measure import measure
from simtrain.calibrate.records import Measurements
from validation.steps import predict_step
from validation.workloads import unseen_workloads, workloads

__all__ = ["predictions", "spread", "row_shift", "main", "TARGET"]

TARGET = 0.05
"""Largest relative difference between the two profiles' predictions of one model (issue 12)."""


def _measurements(path: Path | None, grid: str, threads: int, passes: int) -> Measurements:
    if path is not None and path.exists():
        return Measurements.load(path)
    m = measure("cpu", grid=grid, threads=threads, collectives=False, passes=passes,
                log=lambda msg: print(msg, flush=True))
    if path is not None:
        m.save(path)
    return m


def predictions(devices: dict[str, object], size: str = "medium") -> list[dict]:
    """Every zoo and unseen model's predicted step time under each device."""
    rows = []
    for w in workloads(size) + unseen_workloads(size):
        module, inputs, loss_fn = w.build("cpu", seed=0)
        model = st.Model.from_torch(copy.deepcopy(module), inputs, loss_fn, name=w.name)
        rows.append({"case": w.case, "unseen": w.unseen,
                     "predicted_s": {k: predict_step(model, d, w.batch, w.optimizer).step_time_s
                                     for k, d in devices.items()}})
    return rows


def spread(row: dict) -> float:
    """(max − min) / min of one model's predictions."""
    v = list(row["predicted_s"].values())
    return (max(v) - min(v)) / min(v)


def row_shift(a: Measurements, b: Measurements) -> dict[str, tuple[int, float]]:
    """Per bench (sentinels included), the number of benchmarks both sets timed and the median of
    B's time over A's: whether the machine or the fit moved between the two calibrations (a shift
    shared by a whole bench is the machine; the fit would move only some parameters)."""
    import statistics

    from simtrain.calibrate.robust import benchmark_key
    theirs = {benchmark_key(r): r for r in b.rows}
    ratios: dict[str, list[float]] = {}
    for r in a.rows:
        other = theirs.get(benchmark_key(r))
        if other is not None and r.median_s > 0:
            ratios.setdefault(r.bench, []).append(other.median_s / r.median_s)
    return {k: (len(v), statistics.median(v)) for k, v in sorted(ratios.items())}


def _shift_lines(shift: dict[str, tuple[int, float]]) -> list[str]:
    if not shift:
        return []
    cells = ", ".join(f"{bench} {ratio:.2f} ({n})" for bench, (n, ratio) in shift.items())
    return ["Median time of calibration B's benchmarks over A's, per bench (benchmarks compared): " + cells
            + ". A shift shared by every bench is the machine moving between the sets, not the fit.", ""]


def _markdown(rows: list[dict], meta: dict) -> str:
    worst = max(rows, key=spread)
    met = all(spread(r) <= TARGET for r in rows)
    lines = ["# Back-to-back calibrations: do they predict the same step times? (issue 12)", "",
             f"- machine: {meta['machine']}; torch {torch.__version__}; {meta['threads']} threads; grid {meta['grid']}; "
             f"passes per calibration {meta['passes']}",
             f"- measured {meta['when']}; each set {', '.join(f'{s:.0f} s' for s in meta['seconds'])}; "
             f"1-minute load average before each: {', '.join(str(x) for x in meta['load'])}",
             f"- command: `{meta['command']}`", "",
             f"**Largest difference between the two profiles' predictions: {100 * spread(worst):.1f} % "
             f"({worst['case']}); mean {100 * sum(map(spread, rows)) / len(rows):.1f} %. Target: every model "
             f"within {100 * TARGET:.0f} % — {'met' if met else 'not met'}.**", "",
             *_shift_lines(meta.get("shift", {})),
             "| model | unseen | calibration A | calibration B | difference |", "|---|---|---:|---:|---:|"]
    for r in rows:
        a, b = r["predicted_s"].values()
        lines.append(f"| {r['case']} | {'yes' if r['unseen'] else ''} | {a * 1e3:.2f} ms | {b * 1e3:.2f} ms | "
                     f"{100 * spread(r):.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("simtrain-validation"))
    p.add_argument("--measurements", type=Path, nargs=2, metavar=("A", "B"), default=None,
                   help="two measurement files: loaded where they exist, else measured and saved there")
    p.add_argument("--grid", default="full")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--passes", type=int, default=1, help="passes over the grid per calibration (st.measure)")
    args = p.parse_args(argv)
    paths = args.measurements or (None, None)
    sets, seconds, load = [], [], []
    for path in paths:
        load.append(round(os.getloadavg()[0], 2))
        t0 = time.perf_counter()
        sets.append(_measurements(path, args.grid, args.threads, args.passes))
        seconds.append(time.perf_counter() - t0)
    torch.set_num_threads(args.threads)
    devices = {name: fit(m).device for name, m in zip("AB", sets, strict=True)}
    rows = predictions(devices)
    meta = {"machine": f"{sets[0].machine.cpu_model} ({sets[0].machine.cpu_cores} cores)", "threads": args.threads,
            "passes": [m.settings.get("passes", 1) for m in sets],
            "grid": args.grid, "when": sets[0].machine.date, "seconds": seconds, "load": load,
            "shift": row_shift(*sets),
            "command": shlex.join(["python", "-m", "validation.repeatability", *sys.argv[1:]])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "repeatability.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (args.out / "repeatability.md").write_text(_markdown(rows, meta))
    for r in rows:
        print(f"{r['case']:24s} " + " ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in r["predicted_s"].items())
              + f"  {100 * spread(r):5.1f} %")
    print(f"largest difference {100 * max(map(spread, rows)):.1f} % (target {100 * TARGET:.0f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
