"""``simtrain calibrate``: measure this machine with real PyTorch, fit a device, write a profile.

    simtrain calibrate --device cpu --quick --out profile.yaml [--measurements m.json] [--base host-cpu]

``--measurements PATH`` reads the measurements from PATH when it exists (no new run) and otherwise
measures and saves them there. The profile is a device spec: ``st.load_device("profile.yaml")``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from simtrain.cli._json import dumps

__all__ = ["register", "run"]


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure this machine and fit a calibrated device profile",
                              description="Run PyTorch microbenchmarks on this machine, fit the device's "
                                          "efficiency parameters and write a calibration profile (YAML).")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="what to measure (default cpu)")
    p.add_argument("--quick", action="store_true", help="the quick grid (about a minute on two cores)")
    p.add_argument("--grid", choices=("tiny", "quick", "full"), help="benchmark grid (overrides --quick)")
    p.add_argument("--threads", type=int, help="torch intra-op threads for the compute benchmarks")
    p.add_argument("--base", help="device spec to start from (library name or path; default: see docs)")
    p.add_argument("--measurements", type=Path,
                   help="read measurements from this JSON if it exists, else measure and save them here")
    p.add_argument("--out", type=Path, default=Path("profile.yaml"), help="profile to write (default profile.yaml)")
    p.add_argument("--residuals", type=Path, help="also write every row's predicted vs measured time (JSON)")
    p.add_argument("--no-collectives", action="store_true", help="skip the torch.distributed benchmarks")
    p.set_defaults(func=run)


def _measurements(args: argparse.Namespace):
    from simtrain.calibrate.measure import measure
    from simtrain.calibrate.records import Measurements
    if args.measurements is not None and args.measurements.exists():
        print(f"measurements: {args.measurements} (loaded)")
        return Measurements.load(args.measurements)
    start = time.perf_counter()
    m = measure(args.device, quick=args.quick, grid=args.grid, threads=args.threads,
                collectives=not args.no_collectives, out=args.measurements,
                log=lambda msg: print(f"  {msg}", file=sys.stderr))
    where = f", saved to {args.measurements}" if args.measurements else ""
    from simtrain.report.format import format_seconds
    print(f"measurements: {len(m.rows)} rows in {format_seconds(time.perf_counter() - start)}{where}")
    return m


def run(args: argparse.Namespace) -> int:
    from simtrain.calibrate.fit import fit
    m = _measurements(args)
    cal = fit(m, args.base)
    cal.save_profile(args.out)
    print(f"profile: {args.out}  device {cal.device.name}  key {cal.key[:16]}")
    if args.residuals is not None:
        args.residuals.parent.mkdir(parents=True, exist_ok=True)
        args.residuals.write_text(dumps([r.to_dict() for r in cal.residuals], indent=1) + "\n")
        print(f"residuals: {args.residuals}")
    print("residuals (predicted vs measured):")
    for line in cal.summary():
        print(f"  {line}")
    return 0
