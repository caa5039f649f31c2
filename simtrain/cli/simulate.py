"""``simtrain simulate JOB.yaml [--trace OUT.json] [--gantt OUT.png] [--contention] [--granularity layer|op]``:
the discrete-event engine (docs/simulator.md), the same report fields as ``estimate``."""

from __future__ import annotations

from pathlib import Path

from simtrain.cli._json import dumps
from simtrain.cli.estimate import add_job_arguments, chosen_line, load_job_inputs, with_chosen

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("simulate", help="discrete-event simulation of a job (same report as estimate)")
    add_job_arguments(p)
    p.add_argument("--trace", help="write the timeline as Chrome/Perfetto trace JSON to this path")
    p.add_argument("--gantt", help="write a pipeline Gantt chart (PNG) to this path")
    p.add_argument("--contention", action="store_true",
                   help="collectives that meet on one physical link share its bandwidth")
    p.add_argument("--granularity", choices=("chunk", "layer", "op"), default="chunk",
                   help="a task's compute as one slice (chunk) or one per layer")
    p.set_defaults(func=run)


def _write(path: str, what: str, writer) -> None:
    """Write an output file checked by :func:`check_outputs`; a write that still fails (the disk
    filled up meanwhile) is bad input (exit 2), not a traceback."""
    from simtrain.errors import SpecError
    try:
        writer(Path(path))
    except OSError as err:
        raise SpecError.one(path, what, f"cannot write: {err.strerror or err}") from None


def check_outputs(args) -> None:
    """--trace (JSON) and --gantt (an image) checked before anything is simulated (simtrain/outputs.py)."""
    from simtrain.outputs import IMAGE_SUFFIXES, JSON_SUFFIXES, check_output_path
    if args.trace is not None:
        check_output_path(args.trace, "--trace", JSON_SUFFIXES)
    if args.gantt is not None:
        check_output_path(args.gantt, "--gantt", IMAGE_SUFFIXES)


def run(args) -> int:
    from simtrain.report.text import render_report
    from simtrain.sim import simulate
    check_outputs(args)
    model, cluster, cfg, tokens = load_job_inputs(args, choose=True)
    report = simulate(model, cluster, cfg, contention=args.contention, granularity=args.granularity)
    timeline = getattr(report, "timeline", None)
    if timeline is not None:
        if args.trace:
            _write(args.trace, "--trace", timeline.to_chrome_trace)
        if args.gantt:
            _write(args.gantt, "--gantt", timeline.to_gantt_png)
    print(dumps(with_chosen(report.to_dict(), args.chosen)) if args.json else
          chosen_line(args.chosen, args.batch_defaulted) + render_report(report, tokens=tokens))
    return 0 if report.feasible else 1
