"""``simtrain simulate JOB.yaml [--trace trace.json]``: the discrete-event engine, same report fields."""

from __future__ import annotations

from simtrain.cli._json import dumps
from simtrain.cli.estimate import add_job_arguments, load_job_inputs

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("simulate", help="discrete-event simulation of a job (same report as estimate)")
    add_job_arguments(p)
    p.add_argument("--trace", help="write the timeline as Chrome/Perfetto trace JSON to this path")
    p.set_defaults(func=run)


def run(args) -> int:
    from simtrain.report.text import render_report
    from simtrain.sim import simulate
    model, cluster, cfg, tokens = load_job_inputs(args)
    report = simulate(model, cluster, cfg)
    if args.trace and getattr(report, "timeline", None) is not None:
        report.timeline.to_chrome_trace(args.trace)
    print(dumps(report.to_dict()) if args.json else render_report(report, tokens=tokens))
    return 0 if report.feasible else 1
