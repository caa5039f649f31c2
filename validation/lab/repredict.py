"""A committed CPU result re-predicted with the code at hand, from that run's own inputs.

    python -m validation.lab.repredict [--record validation/results/amd-epyc-2c.json]
                                       [--measurements validation/results/measurements-amd-epyc-2c.json]
                                       [--models mlp,gpt]

A change to a cost rule moves every CPU prediction. To check that, you would otherwise have to re-run
the suite on the record's machine: a quiet one, for about 20 minutes, which is often not there. This
module takes what the record committed instead:

* the merged measurement set, which it fits with ``simtrain.calibrate.fit``;
* the overhead chains' measured step times (``calibration.step_overhead.rows``), which it refits with
  ``validation.overhead.overhead_from``;
* each step case's measured time.

It then predicts each zoo and unseen model at the record's size. What moved is the code; the
measurements did not.

The "record" column is the error the run printed, under its own code and its rounds' profile. To
measure a change, run this module once before it and once after it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import simtrain as st
from simtrain.calibrate.fit import fit
from simtrain.calibrate.records import Measurements
from validation.overhead import StepOverhead, overhead_from, with_step_overhead
from validation.steps import predict_step
from validation.workloads import unseen_workloads, workloads

__all__ = ["Repredicted", "repredict", "markdown", "main", "STEP_METRICS", "RECORD", "MEASUREMENTS"]

_RESULTS = Path(__file__).resolve().parents[1] / "results"
RECORD = _RESULTS / "amd-epyc-2c.json"
MEASUREMENTS = _RESULTS / "measurements-amd-epyc-2c.json"
STEP_METRICS = ("step_time", "step_time_unseen")


@dataclass(frozen=True)
class Repredicted:
    case: str
    metric: str
    measured_s: float
    record_s: float
    """What the record's run predicted (its code, its rounds' profile)."""
    now_s: float
    """This code's prediction from the record's measurements and chain timings."""

    def error_pct(self, predicted_s: float) -> float:
        return 100.0 * (predicted_s / self.measured_s - 1.0)


def _chain_times(record: dict) -> dict[int, float]:
    rows = (record.get("calibration") or {}).get("step_overhead", {}).get("rows") or []
    if not rows:
        raise ValueError("the record has no overhead-chain timings (calibration.step_overhead.rows)")
    return {int(r["depth"]): float(r["measured_s"]) for r in rows}


def repredict(record_path: Path = RECORD, measurements_path: Path = MEASUREMENTS,
              models: tuple[str, ...] | None = None) -> tuple[list[Repredicted], StepOverhead]:
    """Each step case of the record (optionally only ``models``) re-predicted; and the refitted
    overhead line (module docstring)."""
    record = json.loads(Path(record_path).read_text())
    chain_s = _chain_times(record)  # before the fit: a record without them fails at once
    device = fit(Measurements.load(measurements_path)).device
    overhead = overhead_from(device, chain_s)
    step_device = with_step_overhead(device, overhead)
    cases = {c["case"]: c for c in record["cases"] if c["metric"] in STEP_METRICS}
    size = (record.get("settings") or {}).get("size", "medium")
    chosen = [w for w in workloads(size) + unseen_workloads(size)
              if w.case in cases and (models is None or w.name in models)]
    out = []
    for w in chosen:
        module, inputs, loss_fn = w.build("cpu", 0)
        model = st.Model.from_torch(module, inputs, loss_fn, name=w.name)
        c = cases[w.case]
        now = predict_step(model, step_device, w.batch, w.optimizer).step_time_s
        out.append(Repredicted(w.case, c["metric"], float(c["measured"]), float(c["predicted"]), now))
    return out, overhead


def _mape(rows: list[Repredicted], metric: str, now: bool) -> float | None:
    errs = [abs(r.error_pct(r.now_s if now else r.record_s)) for r in rows if r.metric == metric]
    return sum(errs) / len(errs) if errs else None


def markdown(rows: list[Repredicted], overhead: StepOverhead) -> str:
    lines = [f"Overhead line refitted: {overhead.fitted_slope_s * 1e6:+.2f} µs per launch (slope), "
             f"{overhead.per_step_s * 1e6:.0f} µs per step, {overhead.step_host_s * 1e6:.0f} µs charged.", "",
             "| case | measured (ms) | record | now |", "|---|---:|---:|---:|"]
    lines += [f"| {r.case} | {r.measured_s * 1e3:.2f} | {r.error_pct(r.record_s):+.1f} % | "
              f"{r.error_pct(r.now_s):+.1f} % |" for r in rows]
    for metric in STEP_METRICS:
        was, now = _mape(rows, metric, False), _mape(rows, metric, True)
        if was is not None:
            lines.append(f"| **{metric} MAPE** | | {was:.1f} % | {now:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.lab.repredict", description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", type=Path, default=RECORD, help="a suite report's JSON (default: the CPU record)")
    ap.add_argument("--measurements", type=Path, default=MEASUREMENTS,
                    help="that run's merged measurement set (default: the CPU record's)")
    ap.add_argument("--models", help="comma-separated zoo / unseen model names (default: every step case)")
    args = ap.parse_args(argv)
    models = tuple(args.models.split(",")) if args.models else None
    try:
        rows, overhead = repredict(args.record, args.measurements, models)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows, overhead), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
