"""``simtrain sweep JOB --grid tp=1,2,4,8 --grid micro_batch_size=1,2 [--out F.parquet|.csv]
[--scheduler ADDRESS] [--no-progress] [--json] [--plot OUT.png]``: a grid of what-ifs over a job.

Each ``--grid KEY=V1,V2,...`` is one axis (a TrainConfig field or ``nodes``); values parse as int,
float, bool (true/false), none, or else text. The best rows print as a table; ``--out`` streams every
row to Parquet / CSV and a rerun resumes from it; ``--plot`` draws a heatmap over the first two
axes with more than one value, or a scaling curve over the only one.
"""

from __future__ import annotations

from simtrain.cli._json import dumps
from simtrain.cli._types import positive_int
from simtrain.cli.estimate import add_job_arguments, load_job_inputs
from simtrain.errors import SimtrainError, SpecError

__all__ = ["register", "run", "parse_grid", "parse_value"]


def register(sub) -> None:
    p = sub.add_parser("sweep", help="evaluate a grid of layouts / batch sizes / node counts over a job")
    add_job_arguments(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="one sweep axis (repeat for more); KEY is a TrainConfig field or 'nodes'")
    p.add_argument("--engine", choices=("auto", "estimate", "simulate"), default="auto",
                   help="auto (default): the estimate's rows, vectorized where exact; estimate: st.estimate per "
                        "point; simulate: the event simulator per point")
    p.add_argument("--out", help="stream every row to this .parquet or .csv file (a rerun resumes from it)")
    p.add_argument("--fresh", action="store_true", help="overwrite --out instead of resuming from it")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this dask.distributed scheduler (tcp://host:8786)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sort", default="samples_per_s", help="rank the printed rows by this column")
    p.add_argument("--top", type=positive_int, default=10, help="how many of the best rows to print")
    p.add_argument("--plot", metavar="OUT.png", help="draw a heatmap (two axes) or scaling curve (one axis)")
    p.set_defaults(func=run)


def parse_value(text: str):
    """``"4"`` → 4, ``"0.5"`` → 0.5, ``"true"`` → True, ``"none"`` → None, anything else the text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text.strip()


def parse_grid(args: list[str]) -> dict[str, list]:
    """``["tp=1,2", "precision=bf16,fp8"]`` → ``{"tp": [1, 2], "precision": ["bf16", "fp8"]}``."""
    if not args:
        raise SpecError.one(None, "--grid", "give at least one axis, e.g. --grid tp=1,2,4,8")
    grid: dict[str, list] = {}
    for arg in args:
        key, sep, values = arg.partition("=")
        key = key.strip().replace("-", "_")
        items = [v for v in values.split(",") if v.strip()]
        if not sep or not key or not items:
            raise SpecError.one(None, "--grid", f"{arg!r}: expected KEY=V1,V2,... (e.g. tp=1,2,4,8)")
        if key in grid:
            raise SpecError.one(None, "--grid", f"{arg!r}: axis {key!r} given twice")
        grid[key] = [parse_value(v) for v in items]
    return grid


def _client(address: str | None):
    if address is None:
        return None
    try:
        from distributed import Client
    except ImportError as err:
        raise SimtrainError("--scheduler needs dask.distributed: pip install 'simtrain[dask]'") from err
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as err:
        raise SimtrainError(f"--scheduler {address}: cannot connect: {err}") from err


def _plot(df, grid: dict[str, list], sort: str, path: str) -> None:
    from simtrain.report.plot_sweep import scaling_curve, sweep_heatmap
    axes = [k for k in grid if len(grid[k]) > 1]
    if not axes:
        raise SpecError.one(None, "--plot", "needs an axis with more than one value")
    if len(axes) == 1:
        scaling_curve(df, axes[0], sort, ideal=axes[0] == "nodes", path=path)
    else:
        sweep_heatmap(df, axes[0], axes[1], sort, path=path)


def _check_outputs(args, grid: dict[str, list]) -> None:
    """--out (the rows) and --plot (a figure) checked before any point runs (simtrain/outputs.py)."""
    from simtrain.outputs import IMAGE_SUFFIXES, TABLE_SUFFIXES, check_output_path
    if args.out is not None:
        check_output_path(args.out, "--out", TABLE_SUFFIXES)
    if args.plot is not None:
        if not any(len(v) > 1 for v in grid.values()):
            raise SpecError.one(None, "--plot", "needs an axis with more than one value")
        check_output_path(args.plot, "--plot", IMAGE_SUFFIXES)


def run(args) -> int:
    from simtrain.report.sweep_table import render_sweep
    from simtrain.search.sweep import sweep
    from simtrain.search.sweep_rows import RESULT_COLUMNS
    grid = parse_grid(args.grid)
    if args.sort not in RESULT_COLUMNS and args.sort not in grid:
        raise SpecError.one(None, "--sort", f"no column {args.sort!r}; e.g. samples_per_s, step_time_s, mfu")
    _check_outputs(args, grid)
    model, cluster, cfg, _ = load_job_inputs(args)
    client = _client(args.scheduler)
    try:
        df = sweep(model, cluster, cfg, grid, engine=args.engine, client=client, out=args.out, resume=not args.fresh,
                   progress=False if args.no_progress else None)
    finally:
        if client is not None:
            client.close()
    if args.plot:
        _plot(df, grid, args.sort, args.plot)
    if args.json:
        print(dumps(df.to_dict(orient="records")))
    else:
        print(render_sweep(df, sort=args.sort, top=args.top))
    return 0 if df["feasible"].any() else 1
