"""Arguments of the validation suite, shared by ``python -m validation`` and ``simtrain validate``."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_arguments", "config_from_args", "run_args", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="CI variant: the zoo's tiny sizes, 2 repeats, the tiny measurement grid (about a minute)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train and measure (default cpu)")
    p.add_argument("--out", type=Path, default=None,
                   help="report directory (default ./simtrain-validation/, or ~/.cache/simtrain/validation when the current "
                        "directory is inside the source checkout; never the committed validation/results/ unless "
                        "named here); files are <machine>.{json,md,png}")
    p.add_argument("--measurements", type=Path, default=None,
                   help="measurements JSON to calibrate from: loaded if it exists, else measured and saved there "
                        "(the 1-thread set for DDP is <stem>.t1.json beside it)")
    p.add_argument("--models", default=None, help="comma-separated zoo and unseen models (default: all)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per model (default 2 quick, 15 full)")
    p.add_argument("--rounds", type=int, default=None,
                   help="alternate calibration passes and step timings this many times and compare medians "
                        "(default 1 quick, 3 full; later passes are saved as <stem>.round<k>.json)")


def config_from_args(args: argparse.Namespace, command: str = ""):
    from validation.outdir import default_out_dir
    from validation.suite import full_config, quick_config
    over = {"device": args.device, "out_dir": args.out or default_out_dir(), "measurements": args.measurements,
            "command": command}
    if args.models:
        over["models"] = tuple(m.strip() for m in args.models.split(",") if m.strip())
    if args.repeats:
        over["repeats"] = args.repeats
    if args.rounds:
        over["rounds"] = args.rounds
    return quick_config(**over) if args.quick else full_config(**over)


def run_args(args: argparse.Namespace, command: str = "") -> int:
    from simtrain.errors import SpecError
    from validation.suite import run_suite
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise SpecError.one(None, "device", "cuda requested but torch.cuda.is_available() is False")
    if args.models:
        from validation.unseen import UNSEEN
        from validation.zoo import ZOO
        unknown = [m for m in args.models.split(",") if m.strip() and m.strip() not in {**ZOO, **UNSEEN}]
        if unknown:
            raise SpecError.one(None, "models", f"unknown models {unknown}; known: {', '.join([*ZOO, *UNSEEN])}")
    result = run_suite(config_from_args(args, command))
    for kind, path in result.paths.items():
        print(f"{kind}: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import shlex
    import sys

    from simtrain.errors import SimtrainError
    parser = argparse.ArgumentParser(prog="python -m validation", description="simtrain's validation suite: "
                                     "calibrate from microbenchmarks, train the zoo for real, compare, report.")
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        return run_args(args, shlex.join(["python", "-m", "validation", *argv]))
    except SimtrainError as err:
        print(f"validation: error: {err}", file=sys.stderr)
        return 2
