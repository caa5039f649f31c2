"""``simtrain compare MODEL HW1 HW2 ... [config flags]``: one workload across hardware, one row each.

    simtrain compare gpt2 dgx-h100 tpu-v5p-pod cs-3-cluster alveo-u280 --seq-len 1024
    simtrain compare gpt2 dgx-h100 mi300x --tokens 1e9 --out compare.png --csv compare.csv

Each cluster named runs at one node unless ``--nodes`` says otherwise (st.compare). Rows that cannot
run say why; the exit status is 0 when at least one row runs, 1 when none does.
"""

from __future__ import annotations

from simtrain.cli._json import dumps
from simtrain.cli.estimate import _CONFIG_FLAGS

__all__ = ["register", "run", "render_compare"]


def register(sub) -> None:
    p = sub.add_parser("compare", help="one workload across hardware kinds: time, memory, energy, cost, bottleneck")
    p.add_argument("model", help="model name or path")
    p.add_argument("hardware", nargs="+", help="cluster or device names or paths")
    p.add_argument("--nodes", type=int, help="node count of every cluster (default: one node each)")
    p.add_argument("--tokens", type=float, help="also time, energy and cost to train this many tokens")
    p.add_argument("--engine", choices=("estimate", "simulate"), default="estimate")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--csv", help="also write the table as CSV to this path")
    p.add_argument("--out", help="also draw the comparison figure to this image file")
    for flag, typ in _CONFIG_FLAGS.items():
        p.add_argument(f"--{flag}", type=typ, dest=flag.replace("-", "_"))
    p.add_argument("--sequence-parallel", action="store_true", default=None)
    p.set_defaults(func=run)


def _config(args):
    from simtrain.specs.train import TrainConfig
    fields = {f.replace("-", "_"): getattr(args, f.replace("-", "_")) for f in _CONFIG_FLAGS}
    fields["sequence_parallel"] = args.sequence_parallel
    return TrainConfig.build(None, **{"global_batch_size": 8, **{k: v for k, v in fields.items() if v is not None}})


def render_compare(df) -> str:
    """The comparison as a text table (numbers formatted by report/format.py), then the reasons."""
    import pandas as pd

    from simtrain.report.format import format_bytes, format_percent, format_seconds, render_table

    def num(v, fmt):  # a missing value (None, NaN, pandas' NA of a "cannot run" row) prints as "-"
        return "-" if v is None or pd.isna(v) else fmt(float(v))

    def text(v) -> str:
        return v if isinstance(v, str) and v else "-"
    rows = []
    for r in df.itertuples(index=False):
        mem = "-" if r.memory_fits is None or pd.isna(r.memory_fits) else \
            f"{num(r.memory_reserved_bytes, format_bytes)} / {num(r.memory_capacity_bytes, format_bytes)}"
        rows.append([r.hardware, text(r.kind), num(r.devices, lambda v: f"{v:.0f}"), r.status,
                     num(r.step_time_s, format_seconds), num(r.tokens_per_s, lambda v: f"{v:,.0f}"),
                     num(r.mfu, format_percent), mem, num(r.energy_per_mtoken_kwh, lambda v: f"{v:.3g}"),
                     num(r.cost_per_mtoken_dollars, lambda v: f"{v:.3g}"), text(r.bottleneck)])
    table = render_table(["hardware", "kind", "devices", "status", "step", "tokens/s", "MFU", "memory (reserved / usable)",
                          "kWh/Mtok", "$/Mtok", "bottleneck"], rows, right=(2, 4, 5, 6, 8, 9))
    notes = [f"  {r.hardware}: {r.reason}" for r in df.itertuples(index=False) if text(r.reason) != "-"]
    return table + ("\n\nwhy:\n" + "\n".join(notes) if notes else "")


def _write_csv(df, path: str) -> None:
    from simtrain.errors import SpecError
    try:
        df.to_csv(path, index=False)
    except OSError as err:
        raise SpecError.one(path, "--csv", f"cannot write: {err.strerror or err}") from None


def run(args) -> int:
    from simtrain.outputs import CSV_SUFFIXES, IMAGE_SUFFIXES, check_output_path
    from simtrain.report.compare import compare
    if args.csv is not None:  # every output checked before any row is costed
        check_output_path(args.csv, "--csv", CSV_SUFFIXES)
    if args.out is not None:
        check_output_path(args.out, "--out", IMAGE_SUFFIXES)
    df = compare(args.model, args.hardware, _config(args), nodes=args.nodes, tokens=args.tokens, engine=args.engine)
    if args.csv:
        _write_csv(df, args.csv)
    if args.out:
        from simtrain.report.plot_compare import compare_bar
        compare_bar(df, path=args.out)
    if args.json:
        print(dumps(df.astype(object).where(df.notna(), None).to_dict(orient="records")))
    else:
        print(render_compare(df))
    return 0 if (df["status"] == "ok").any() else 1
