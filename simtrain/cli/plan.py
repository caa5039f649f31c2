"""``simtrain plan MODEL HARDWARE --tokens 15e12 [--deadline-days 90] [--budget-usd 5e7]
[--max-devices N] [--objective cost|time|energy] [--json] [--plot pareto.png]``: the cheapest (fastest,
leanest) layouts and cluster sizes that train MODEL on HARDWARE by the deadline and within the budget.

Exit status: 0 with a plan, 1 when nothing meets the constraints (the reasons are printed), 2 on bad input.
"""

from __future__ import annotations

import math

from simtrain.cli._json import dumps
from simtrain.cli._types import positive_int
from simtrain.errors import SpecError

__all__ = ["register", "run"]

_COLUMNS = ("devices", "tp", "pp", "dp", "cp", "ep", "micro_batch_size", "virtual_stages", "sequence_parallel",
            "zero_stage", "recompute", "time_to_train_days", "cost_usd", "energy_kwh", "mfu", "why")


def register(sub) -> None:
    p = sub.add_parser("plan", help="capacity planning: devices and layout to train on N tokens by a deadline")
    p.add_argument("model", help="model name or path")
    p.add_argument("hardware", help="cluster name or path")
    p.add_argument("--tokens", type=float, required=True, help="tokens to train on (e.g. 15e12)")
    p.add_argument("--deadline-days", type=float, help="finish within this many days")
    p.add_argument("--budget-usd", type=float, help="spend at most this many US dollars")
    p.add_argument("--max-devices", type=int, help="use at most this many devices")
    p.add_argument("--objective", default="cost", choices=("cost", "time", "energy"))
    p.add_argument("--global-batch-size", type=int, default=1024)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--stack", help="software-stack preset (simtrain stacks)")
    p.add_argument("--max-nodes", type=int, default=512)
    p.add_argument("--top", type=positive_int, default=10, help="layouts to list")
    p.add_argument("--mtbf-device-hours", type=float,
                   help="goodput-aware: mean time between failures of one device, in hours (Daly's wall time)")
    p.add_argument("--restart-minutes", type=float, default=10.0, help="restart + reload after a failure")
    p.add_argument("--checkpoint-write-gbps", type=float,
                   help="storage write rate for checkpoints, GB/s (needed with --mtbf-device-hours)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--plot", help="write the time / cost Pareto figure to this path (PNG, SVG, PDF)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _check(args) -> None:
    for flag in ("tokens", "deadline_days", "budget_usd", "max_devices", "global_batch_size", "seq_len",
                 "max_nodes", "top"):
        value = getattr(args, flag)
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise SpecError.one(None, f"--{flag.replace('_', '-')}", f"must be a positive number, got {value!r}")


def run(args) -> int:
    from simtrain.search.plan import plan
    _check(args)
    if args.plot is not None:  # before the search
        from simtrain.outputs import IMAGE_SUFFIXES, check_output_path
        check_output_path(args.plot, "--plot", IMAGE_SUFFIXES)
    df = plan(args.model, args.hardware, tokens=args.tokens,
              deadline_s=None if args.deadline_days is None else args.deadline_days * 86400.0,
              budget_usd=args.budget_usd, max_devices=args.max_devices, objective=args.objective,
              global_batch_size=args.global_batch_size, seq_len=args.seq_len, precision=args.precision,
              stack=args.stack, max_nodes=args.max_nodes, top=args.top,
              mtbf_device_s=None if args.mtbf_device_hours is None else args.mtbf_device_hours * 3600.0,
              restart_s=args.restart_minutes * 60.0,
              checkpoint_write_bytes_per_s=None if args.checkpoint_write_gbps is None else args.checkpoint_write_gbps * 1e9,
              progress=False if args.no_progress else None)
    if args.json:
        print(dumps(_as_json(df)))
    else:
        print(_as_text(df))
    if df.empty:
        return 1
    if args.plot:
        from simtrain.report.plot_plan import plot_plan
        plot_plan(df, args.plot)
    return 0


def _as_json(df) -> dict:
    rows = df[list(_COLUMNS)].to_dict(orient="records") if not df.empty else []
    front = df.attrs.get("pareto")
    out = {"plans": rows, "pareto": [] if front is None or front.empty else
           front[[c for c in _COLUMNS if c != "why"]].to_dict(orient="records"),
           "layouts_searched": df.attrs.get("layouts_searched")}
    if df.empty:
        out["explanation"] = df.attrs.get("explanation")
    return out


def _as_text(df) -> str:
    if df.empty:
        return f"no plan: {df.attrs.get('explanation', '')}"
    lines = [f"{len(df)} best of {df.attrs.get('layouts_searched')} layouts searched"]
    for i, r in df.iterrows():
        cost = "" if math.isnan(r.cost_usd) else f"${r.cost_usd:,.0f}  "
        lines.append(f"#{i + 1:<3} {int(r.devices):>6} devices  tp={r.tp} pp={r.pp} dp={r.dp} cp={r.cp} ep={r.ep} "
                     f"mb={r.micro_batch_size} v={r.virtual_stages} sp={'on' if r.sequence_parallel else 'off'} "
                     f"ZeRO-{r.zero_stage} recompute={r.recompute}  {r.time_to_train_days:.1f} days  {cost}"
                     f"{r.energy_kwh / 1e3:,.0f} MWh\n     {r.why}")
    lines.append(f"Pareto front (time / cost / energy): {len(df.attrs.get('pareto', []))} layouts")
    return "\n".join(lines)
