"""``simtrain calibrate``: measure this machine with real PyTorch, fit a device, write a profile.

    simtrain calibrate --device cpu --quick --out profile.yaml [--measurements m.json] [--base host-cpu]

    simtrain calibrate --runs runs.csv --out calibration.yaml      # from measured runs (CSV / JSONL)

``--measurements PATH`` reads the measurements from PATH when it exists (no new run) and otherwise
measures and saves them there. The profile is a device spec: ``st.load_device("profile.yaml")``.
A measurement taken on a contended machine (CPU steal, other processes' load, wide sample spread,
a machine-speed sentinel past its limit — an in-cache GEMM or a 64 MiB read, timed after every bench
group, whose slow groups are measured again first: :mod:`simtrain.calibrate.robust` and
:mod:`simtrain.calibrate.robust`) is refused: the command says why,
writes no profile and exits 3, unless ``--allow-noisy``.

``--runs FILE`` fits ``st.calibrate_runs`` to the runs of a CSV / JSONL file
(:mod:`simtrain.calibrate.runs`) and writes the ``st.Calibration`` YAML to ``--out``.

``--trace TRACE.json --model M`` fits per-op-class factors to a ``torch.profiler`` Chrome trace of
model M (:mod:`simtrain.calibrate.trace_fit`) on ``--hardware`` (default ``host-cpu``) with the
traced run's batch (``--global-batch-size``, required) and settings, and writes the calibration:

    simtrain calibrate --trace a.trace.json --model mlp-mnist --global-batch-size 64 --out cal.yaml

``--compare-ops N`` also prints the N ops whose measured time (the trace's call with its backward)
is furthest from the predicted one (:mod:`simtrain.calibrate.trace_fit`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from simtrain.cli._json import dumps

__all__ = ["register", "run", "NOISY_EXIT"]

NOISY_EXIT = 3
"""Exit status when the measurement is judged unreliable (2 stays "bad input")."""


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure this machine and fit a calibrated device profile",
                              description="Run PyTorch microbenchmarks on this machine, fit the device's "
                                          "efficiency parameters and write a calibration profile (YAML).")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="what to measure (default cpu)")
    p.add_argument("--quick", action="store_true", help="the quick grid (about a minute on two cores)")
    p.add_argument("--grid", choices=("tiny", "quick", "full"), help="benchmark grid (overrides --quick)")
    p.add_argument("--threads", type=int, help="torch intra-op threads for the compute benchmarks")
    p.add_argument("--passes", type=int, default=1,
                   help="time the grid this many times in a row and keep each benchmark's median over the "
                        "passes (a shared machine's speed drifts over minutes; default 1)")
    p.add_argument("--colocated", type=int, default=1, metavar="RANKS",
                   help="CPU ranks that will share this host (one process per core, as DDP on CPU): the compute "
                        "benches run beside RANKS − 1 processes running the same benches, so the profile is "
                        "what one rank's cores deliver with its neighbours busy; then RANKS processes run one "
                        "workload in lockstep to measure how long a synchronous step waits for the slowest "
                        "(rank_jitter_sigma) (default 1: the machine alone)")
    p.add_argument("--base", help="device spec to start from (library name or path; default: see docs)")
    p.add_argument("--measurements", type=Path,
                   help="read measurements from this JSON if it exists, else measure and save them here")
    p.add_argument("--out", type=Path, default=Path("profile.yaml"), help="profile to write (default profile.yaml)")
    p.add_argument("--residuals", type=Path, help="also write every row's predicted vs measured time (JSON)")
    p.add_argument("--no-collectives", action="store_true", help="skip the torch.distributed benchmarks")
    p.add_argument("--allow-noisy", action="store_true",
                   help="write the profile even when the machine was contended while measuring")
    p.add_argument("--runs", type=Path,
                   help="calibrate from measured runs (CSV / JSONL: model, hardware, step_time_s, TrainConfig "
                        "fields) with st.calibrate_runs instead of microbenchmarks")
    t = p.add_argument_group("from a torch.profiler trace")
    t.add_argument("--trace", type=Path, help="a torch.profiler Chrome trace (export_chrome_trace) to fit "
                                             "per-op-class factors to")
    t.add_argument("--model", help="the traced model (library name or model YAML)")
    t.add_argument("--hardware", default="host-cpu", help="device / cluster name or path (default host-cpu)")
    t.add_argument("--steps", type=int, help="training steps in the trace (default: its step markers)")
    t.add_argument("--untraced-step-time", type=float, dest="untraced_step_s", metavar="SECONDS",
                   help="the same step timed without the profiler: the trace's own overhead is taken out first")
    t.add_argument("--compare-ops", type=int, metavar="N", dest="compare_ops",
                   help="also print the N ops furthest from their prediction (trace call vs model op, fw / bw)")
    for flag, typ in _TRACE_CONFIG.items():
        t.add_argument(f"--{flag}", type=typ, dest=flag.replace("-", "_"))
    p.set_defaults(func=run)


_TRACE_CONFIG = {"global-batch-size": int, "micro-batch-size": int, "seq-len": int, "precision": str,
                 "optimizer": str, "stack": str}


def _measurements(args: argparse.Namespace):
    from simtrain.calibrate.measure import measure
    from simtrain.calibrate.records import Measurements
    if args.measurements is not None and args.measurements.exists():
        print(f"measurements: {args.measurements} (loaded)")
        return Measurements.load(args.measurements)
    start = time.perf_counter()
    m = measure(args.device, quick=args.quick, grid=args.grid, threads=args.threads,
                collectives=not args.no_collectives, out=args.measurements, passes=args.passes,
                colocated=args.colocated,
                log=lambda msg: print(f"  {msg}", file=sys.stderr))
    where = f", saved to {args.measurements}" if args.measurements else ""
    from simtrain.report.format import format_seconds
    print(f"measurements: {len(m.rows)} rows in {format_seconds(time.perf_counter() - start)}{where}")
    return m


def _from_runs(args: argparse.Namespace) -> int:
    from simtrain.calibrate.run_files import load_run_records
    from simtrain.calibrate.runs import calibrate_runs
    records = load_run_records(args.runs)
    cal = calibrate_runs(records)
    out = _out(args)
    _written(out, "--out", cal.to_yaml)
    print(f"runs: {len(records)} from {args.runs}")
    print(cal.summary())
    print(f"calibration: {out}")
    return 0


def _from_trace(args: argparse.Namespace) -> int:
    from simtrain.calibrate.trace_fit import calibrate_classes, load_times
    from simtrain.errors import SpecError
    from simtrain.graph.library import load_model
    from simtrain.inputs import hardware_cluster
    from simtrain.specs.train import TrainConfig
    if not args.model:
        raise SpecError.one(None, "--model", "--trace needs the traced model (--model NAME or PATH)")
    fields = {f.replace("-", "_"): getattr(args, f.replace("-", "_")) for f in _TRACE_CONFIG}
    fields = {k: v for k, v in fields.items() if v is not None}
    if "global_batch_size" not in fields:
        raise SpecError.one(None, "--global-batch-size", "--trace needs the traced run's batch per step")
    fields.setdefault("micro_batch_size", fields["global_batch_size"])
    cfg = TrainConfig.build("(flags)", **fields)
    if args.compare_ops is not None and args.compare_ops < 1:
        raise SpecError.one(None, "--compare-ops", "must be a number of ops ≥ 1")
    model, cluster = load_model(args.model), hardware_cluster(args.hardware, arg="--hardware")
    times = load_times(args.trace, args.steps, args.untraced_step_s)  # read once, for the fit and the table
    cal = calibrate_classes(times, model, cluster, cfg)
    out = _out(args)
    _written(out, "--out", cal.to_yaml)
    print(cal.summary())
    print(f"calibration: {out}")
    if args.compare_ops is not None:
        from simtrain.calibrate.trace_fit import compare_ops, ops_table
        print(ops_table(compare_ops(times, model, cluster, cfg), args.compare_ops))
    return 0


def _refused(m, allow_noisy: bool) -> bool:
    """Print why a measurement is unreliable; True when that stops the command."""
    from simtrain.calibrate.robust import measurements_contention
    verdict = measurements_contention(m)
    if verdict.reliable:
        return False
    head = "warning" if allow_noisy else "error"
    print(f"calibrate: {head}: the measurement is unreliable (the machine was contended):", file=sys.stderr)
    for reason in verdict.reasons:
        print(f"  - {reason}", file=sys.stderr)
    if not allow_noisy:
        print("calibrate: no profile written; measure on a quiet machine, or pass --allow-noisy to keep it",
              file=sys.stderr)
    return not allow_noisy


def _out(args: argparse.Namespace) -> Path:
    """The file --out names: a calibration from runs or a trace defaults to calibration.yaml."""
    if (args.runs is not None or args.trace is not None) and args.out == Path("profile.yaml"):
        return Path("calibration.yaml")
    return args.out


def _written(path: Path, flag: str, writer) -> None:
    """``writer(path)`` for a path checked by :func:`check_outputs`; a write that still fails is exit 2."""
    from simtrain.errors import SpecError
    try:
        writer(path)
    except OSError as err:
        raise SpecError.one(str(path), flag, f"cannot write: {err.strerror or err}") from None


def check_outputs(args: argparse.Namespace) -> None:
    """Every file calibrate writes, checked before anything is measured or fitted (simtrain/outputs.py):
    --out (YAML), --residuals (JSON), --measurements when it is to be written."""
    from simtrain.outputs import JSON_SUFFIXES, YAML_SUFFIXES, check_output_path
    check_output_path(_out(args), "--out", YAML_SUFFIXES)
    if args.residuals is not None:
        check_output_path(args.residuals, "--residuals", JSON_SUFFIXES)
    if args.runs is None and args.trace is None and args.measurements is not None \
            and not args.measurements.exists():
        check_output_path(args.measurements, "--measurements", (".json", ".parquet"))


def run(args: argparse.Namespace) -> int:
    from simtrain.calibrate.fit import fit
    check_outputs(args)
    if args.runs is not None:
        return _from_runs(args)
    if args.trace is not None:
        return _from_trace(args)
    m = _measurements(args)
    if _refused(m, args.allow_noisy):
        return NOISY_EXIT
    cal = fit(m, args.base)
    _written(args.out, "--out", cal.save_profile)
    print(f"profile: {args.out}  device {cal.device.name}  key {cal.key[:16]}")
    if not cal.fit_info.get("success", True):
        print(f"calibrate: the compute fit stopped at its iteration cap ({cal.fit_info.get('nfev')} iterations) "
              "before converging; check the residuals below, or measure again", file=sys.stderr)
    if args.residuals is not None:
        text = dumps([r.to_dict() for r in cal.residuals], indent=1) + "\n"
        _written(args.residuals, "--residuals", lambda p: p.write_text(text, encoding="utf-8"))
        print(f"residuals: {args.residuals}")
    print("residuals (predicted vs measured):")
    for line in cal.summary():
        print(f"  {line}")
    _warn_fit(cal.fit_info)
    return 0


def _warn_fit(info: dict) -> None:
    """What the fit record says the profile is loose on, each kept but said: rates a paired bench pins
    loosely (calibrate/modes.py), memory modes met between passes and the machine's placement modes
    (calibrate/modes.py)."""
    from simtrain.calibrate.modes import PlacementModes, modes_line, placement_line, wide_ranges
    lines = wide_ranges({k: tuple(v) for k, v in info.get("paired_ranges", {}).items()})
    lines += [modes_line(info["memory_modes"])] if info.get("memory_modes") else []
    if pm := info.get("placement_modes"):
        lines.append(placement_line(PlacementModes.from_dict(pm)) + ": the profile prices that mix; a run that meets one mode only is "
                     "faster or slower than predicted by up to the modes' difference")
    for line in lines:
        print(f"calibrate: warning: {line}", file=sys.stderr)
