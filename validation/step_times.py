"""The measured half of the suite alone: every zoo and unseen model's training step timed on a device,
and its prediction made later, elsewhere, from a measurement file of the same machine.

    python -m validation.step_times time --device cuda --out steps.json [--size standard]
    python -m validation.step_times predict steps.json --measurements M.json [--out report.md]

For a leased machine whose minutes are few: ``st.measure`` and this timing take about three minutes
on one H200, while the fit of a CUDA measurement set (≈ 100 parameters over ≈ 800 rows) takes minutes
of one CPU core, which need no GPU. ``predict`` fits ``M.json`` (``st.calibrate``: microbenchmarks
only, never these steps) and compares each model's predicted step with the time recorded here.

Timing as the suite's (:func:`validation.steps.validate_workload`): the model's own optimizer, TF32
off on CUDA (fp32 is what is predicted), ``warmup`` steps, then the median of ``repeats`` single steps;
on CUDA also the peak allocated memory of one step net of what the process held before the model.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
from pathlib import Path

import torch

__all__ = ["time_all", "predict_all", "main"]


def _workloads(size: str):
    from validation.workloads import unseen_workloads, workloads
    return workloads(size) + unseen_workloads(size)


def time_all(device: str, size: str, warmup: int = 3, repeats: int = 15) -> list[dict]:
    """One record per model: case, unseen, size, batch, optimizer, median / p10 / p90 step seconds,
    peak allocated bytes (CUDA; else None)."""
    from validation.counters import allocated_bytes, peak_allocated_bytes
    from validation.steps import make_optimizer, time_steps, train_step
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    out = []
    for w in _workloads(size):
        baseline = allocated_bytes(device)
        module, inputs, loss_fn = w.build(device, seed=0)
        step = train_step(module, inputs, loss_fn, make_optimizer(w.optimizer, module.parameters(), device))
        t = time_steps(step, device, warmup, repeats)
        peak = peak_allocated_bytes(step, device, baseline)
        out.append({"case": w.case, "name": w.name, "unseen": w.unseen, "size": size, "batch": w.batch,
                    "optimizer": w.optimizer, "median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s,
                    "peak_allocated_bytes": peak})
        print(f"{w.case:26s} {t.median_s * 1e3:9.3f} ms", flush=True)
        del module, inputs, loss_fn, step
    return out


def time_chains(device: str) -> list[dict]:
    """The suite's overhead chains (validation/overhead.py: Linear(8, 8) + ReLU × depth) timed here, so
    ``predict`` can add the in-step per-launch cost the suite adds (:func:`validation.calibration.refined`)."""
    from validation.overhead import DEPTHS, _measure, chain
    out = []
    for depth in DEPTHS:
        torch.manual_seed(0)
        out.append({"depth": depth, "measured_s": _measure(chain(depth).to(device), torch.randn(2, 8, device=device),
                                                          5, 15, device)})
    return out


def refined_spec(device_spec, chains: list[dict]):
    """``device_spec`` with the chains' in-step per-launch cost, as the suite's ``refined`` fits it."""
    from validation.overhead import overhead_from, with_step_overhead
    return with_step_overhead(device_spec, overhead_from(device_spec, {c["depth"]: c["measured_s"] for c in chains}))


def predict_all(records: list[dict], device_spec) -> list[dict]:
    """Each record with ``predicted_s`` and ``error_pct`` under ``device_spec`` (models built on the CPU:
    the graph, not the device, decides the op list)."""
    import simtrain as st
    from validation.steps import predict_step
    by_case = {w.case: w for w in _workloads(records[0]["size"])} if records else {}
    rows = []
    for r in records:
        w = by_case[r["case"]]
        module, inputs, loss_fn = w.build("cpu", seed=0)
        model = st.Model.from_torch(copy.deepcopy(module), inputs, loss_fn, name=w.name)
        report = predict_step(model, device_spec, w.batch, w.optimizer)
        predicted = report.step_time_s
        row = dict(r, predicted_s=predicted, error_pct=100.0 * (predicted / r["median_s"] - 1.0), model=model)
        if r.get("peak_allocated_bytes") and report.memory is not None:
            # as the suite's peak_memory case: the estimator's fragmentation allowance is not allocated
            row["predicted_peak_bytes"] = report.memory.total_bytes - report.memory.overhead_bytes
        rows.append(row)
    return rows


def runs_markdown(rows: list[dict], device_spec) -> list[str]:
    """The suite's "measured runs as calibration input" section for these steps: ``st.calibrate_runs``
    on the zoo's steps predicting the unseen ones, and leave-one-out over all (validation/run_calibration.py)."""
    from validation.report import Case
    from validation.run_calibration import MeasuredRun, run_cases, run_section
    runs = [MeasuredRun(r["case"], r["model"], r["batch"], r["optimizer"], r["median_s"], r["unseen"]) for r in rows]
    cases = run_cases(runs, device_spec) + [Case(r["case"], "step_time_unseen", r["predicted_s"], r["median_s"])
                                            for r in rows if r["unseen"]]
    section = run_section(cases)
    return ["", "## Measured runs as calibration input", "", *section] if section else []


def markdown(rows: list[dict], title: str) -> str:
    lines = [f"# {title}", "", "| model | set | measured | predicted | error | peak allocated: measured | "
             "predicted | error |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        peak, want = r.get("peak_allocated_bytes"), r.get("predicted_peak_bytes")
        mem = (f"{peak / 2**20:.1f} MiB | {want / 2**20:.1f} MiB | {100 * (want / peak - 1):+.1f} %" if peak and want
               else "— | — | —")
        lines.append(f"| {r['case']} | {'unseen' if r['unseen'] else 'zoo'} | {r['median_s'] * 1e3:.2f} ms | "
                     f"{r['predicted_s'] * 1e3:.2f} ms | {r['error_pct']:+.1f} % | {mem} |")
    for unseen in (False, True):
        errs = [abs(r["error_pct"]) for r in rows if r["unseen"] == unseen]
        if errs:
            lines.append(f"\n{'Unseen' if unseen else 'Zoo'}: step-time MAPE {sum(errs) / len(errs):.1f} % over "
                         f"{len(errs)} models.")
    mem = [abs(r["predicted_peak_bytes"] / r["peak_allocated_bytes"] - 1) * 100 for r in rows
           if r.get("predicted_peak_bytes") and r.get("peak_allocated_bytes")]
    if mem:
        lines.append(f"\nPeak allocated memory: MAPE {sum(mem) / len(mem):.1f} % over {len(mem)} models.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.step_times", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time", help="time every model's step on this machine")
    t.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    t.add_argument("--size", default=None, help="zoo size (default: standard on cuda, medium on cpu)")
    t.add_argument("--out", type=Path, required=True)
    q = sub.add_parser("predict", help="predict recorded steps from a measurement file")
    q.add_argument("steps", type=Path)
    q.add_argument("--measurements", type=Path, required=True)
    q.add_argument("--out", type=Path, default=None, help="markdown report (default: print)")
    q.add_argument("--profile-out", type=Path, default=None, help="also save the fitted profile (YAML)")
    args = p.parse_args(argv)
    if args.cmd == "time":
        size = args.size or ("standard" if args.device == "cuda" else "medium")
        records = time_all(args.device, size)
        chains = time_chains(args.device)
        meta = {"device": args.device, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
                "torch": torch.__version__, "host": platform.processor() or platform.machine()}
        args.out.write_text(json.dumps({"meta": meta, "records": records, "chains": chains}, indent=1))
        return 0
    from simtrain.calibrate.fit import fit
    from simtrain.calibrate.records import Measurements
    data = json.loads(args.steps.read_text())
    cal = fit(Measurements.load(args.measurements))
    if args.profile_out:
        cal.save_profile(args.profile_out)
    spec = cal.device
    spec = refined_spec(spec, data["chains"]) if data.get("chains") else spec
    rows = predict_all(data["records"], spec)
    text = markdown(rows, f"Steps on {data['meta'].get('gpu') or data['meta']['device']}, predicted from "
                          f"{args.measurements.name}") + "\n".join(runs_markdown(rows, spec)) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
