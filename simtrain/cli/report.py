"""``simtrain report JOB --out DIR``: the job's report as a static HTML page, DIR/report.html.

    simtrain report JOB.yaml --out report/
    simtrain report --model gpt2 --hardware dgx-h100 --nodes 1 --pp 2 --out report/ --simulate

The page embeds its figures (base64 PNG) and lists warnings, the assumptions and their sources;
``--simulate`` runs the discrete-event engine and adds the pipeline Gantt chart.
"""

from __future__ import annotations

from simtrain.cli.estimate import add_job_arguments, load_job_inputs

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("report", help="write a job's report as a self-contained HTML page")
    add_job_arguments(p, json=False)  # it writes an HTML page: --json would be ignored, so it is refused
    p.add_argument("--out", required=True, help="folder to write report.html into")
    p.add_argument("--simulate", action="store_true", help="use the simulator and draw its timeline")
    p.set_defaults(func=run)


def run(args) -> int:
    from simtrain.outputs import check_output_path
    from simtrain.report.html import REPORT_FILE, write_html_report
    check_output_path(args.out, "--out", folder=True, inside=REPORT_FILE)  # before anything is costed
    model, cluster, cfg, _ = load_job_inputs(args, choose=True)
    if args.chosen is not None:
        print(args.chosen.describe())
    if args.simulate:
        from simtrain.sim import simulate
        report = simulate(model, cluster, cfg)
        timeline = getattr(report, "timeline", None)
    else:
        from simtrain.estimator import estimate
        report, timeline = estimate(model, cluster, cfg), None
    path = write_html_report(report, args.out, model=model, cluster=cluster, cfg=cfg, timeline=timeline)
    print(f"wrote {path}")
    return 0 if report.feasible else 1
