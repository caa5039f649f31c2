"""``simtrain plot KIND JOB --out F.png``: draw one figure of a job (see simtrain/report/plot.py).

    simtrain plot roofline  JOB|--model M --hardware H [config flags] --out roofline.png
    simtrain plot breakdown JOB ... --out breakdown.png     (estimate's time breakdown)
    simtrain plot memory    JOB ... --out memory.png        (every pipeline stage's memory)
    simtrain plot gantt     JOB ... --out gantt.png         (simulate's pipeline timeline)
    simtrain plot validation RESULTS.json --out scatter.png (python -m validation's results)
"""

from __future__ import annotations

from simtrain.cli.estimate import add_job_arguments, load_job_inputs
from simtrain.errors import SpecError

__all__ = ["register", "run", "draw"]


def register(sub) -> None:
    from simtrain.report.plot import KINDS
    p = sub.add_parser("plot", help="draw a figure of a job: roofline, breakdown, memory, gantt, validation")
    p.add_argument("kind", choices=KINDS, help="which figure")
    add_job_arguments(p, json=False)  # it writes an image: --json would be ignored, so it is refused
    p.add_argument("--out", required=True, help="image file to write (.png, .svg or .pdf)")
    p.add_argument("--metric", action="append", help="validation: keep only this metric (repeatable)")
    p.set_defaults(func=run)


def draw(kind: str, args):
    """The Figure of ``kind`` for the job the arguments name."""
    from simtrain.report import plot
    if kind == "validation":
        if not args.job:
            raise SpecError.one(None, "job", "give the validation results JSON (validation/results/*.json)")
        return plot.predicted_vs_measured(args.job, metric=args.metric, path=args.out)
    model, cluster, cfg, _ = load_job_inputs(args, choose=True)  # no layout given: simtrain picks one
    if args.chosen is not None:
        print(args.chosen.describe())
    if kind == "roofline":
        from simtrain.estimator import estimate
        return plot.roofline(model, cluster.device, cfg, report=estimate(model, cluster, cfg), path=args.out)
    if kind == "memory":
        return plot.memory_stack(plot.stage_memory_reports(model, cluster, cfg), path=args.out)
    if kind == "gantt":
        from simtrain.sim import simulate
        return plot.gantt(simulate(model, cluster, cfg).timeline, path=args.out)
    from simtrain.estimator import estimate
    return plot.breakdown(estimate(model, cluster, cfg), path=args.out)


def run(args) -> int:
    from simtrain.outputs import IMAGE_SUFFIXES, check_output_path
    check_output_path(args.out, "--out", IMAGE_SUFFIXES)  # before anything is costed or drawn
    draw(args.kind, args)
    print(f"wrote {args.out}")
    return 0
