"""A sweep's result as text: the best feasible rows, and a count of the rest by status with reasons."""

from __future__ import annotations

from simtrain.report.format import format_bytes, format_percent, format_seconds, format_si, render_table

__all__ = ["render_sweep", "best_rows", "LOWER_IS_BETTER"]

#: metrics where smaller wins; every other numeric column is ranked largest first
LOWER_IS_BETTER = ("step_time_s", "memory_bytes", "memory_reserved_bytes")



def _rate(value: float) -> str:
    return format_si(value, "").strip()  # "1.84 k", "1.89 M": a count per second, unit in the header


_SHOWN = (("step_time_s", "step", format_seconds), ("samples_per_s", "samples/s", _rate),
          ("tokens_per_s", "tokens/s", _rate), ("mfu", "MFU", format_percent),
          ("memory_reserved_bytes", "memory", format_bytes))


def best_rows(df, sort: str = "samples_per_s", top: int = 10):
    """The ``top`` feasible rows ranked by ``sort`` (ascending for LOWER_IS_BETTER columns)."""
    ok = df[df["feasible"]]
    return ok.sort_values(sort, ascending=sort in LOWER_IS_BETTER, kind="stable").head(top)


def _inputs(df) -> list[str]:
    from simtrain.search.sweep_rows import RESULT_COLUMNS
    return [c for c in df.columns if c not in RESULT_COLUMNS and c != "point_key"]


def _summary(df) -> list[str]:
    counts = df["status"].value_counts()
    parts = [f"{int(counts[s])} {s}" for s in ("ok", "infeasible", "invalid", "error") if s in counts]
    lines = [f"{len(df)} points: {', '.join(parts)}"]
    for reason, n in df.loc[~df["feasible"], "reasons"].value_counts().head(3).items():
        lines.append(f"  {n} × {reason[:150]}")
    return lines


def render_sweep(df, sort: str = "samples_per_s", top: int = 10) -> str:
    """The best ``top`` rows by ``sort`` as a table (grid values, step time, throughput, MFU,
    reserved memory, bottleneck), then how many points were infeasible or invalid and why."""
    inputs = _inputs(df)
    best = best_rows(df, sort, top)
    lines = []
    if len(best):
        headers = [*inputs, *(h for _, h, _ in _SHOWN), "bottleneck"]
        rows = [[*(r[c] for c in inputs), *(fmt(r[c]) for c, _, fmt in _SHOWN), r["bottleneck"]]
                for _, r in best.iterrows()]
        right = range(len(inputs), len(inputs) + len(_SHOWN))
        lines += [f"best {len(best)} by {sort}:", render_table(headers, rows, right=right), ""]
    else:
        lines += ["no feasible point", ""]
    return "\n".join(lines + _summary(df))
