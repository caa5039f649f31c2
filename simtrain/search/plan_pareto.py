"""The Pareto front of plans (time vs cost vs energy) and the one-line reason each plan ranks where it does."""

from __future__ import annotations

import numpy as np

__all__ = ["pareto_front", "PARETO_COLUMNS", "why_lines"]

PARETO_COLUMNS = ("time_to_train_s", "cost_usd", "energy_kwh")


def pareto_front(df, columns=PARETO_COLUMNS):
    """The rows of ``df`` no other row beats: a row is dropped when another is at least as good in
    every column of ``columns`` (all minimised; NaN columns are ignored) — so of rows equal in all of
    them only the first stays. Sorted by the first column."""
    cols = [c for c in columns if c in df and df[c].notna().any()]
    if df.empty or not cols:
        return df.iloc[0:0] if not cols else df
    values = df[cols].to_numpy(dtype=float)
    order = np.lexsort(values.T[::-1])  # by the first column, then the next ones
    kept: list[int] = []
    front = np.empty((0, len(cols)))
    for i in order:
        v = values[i]
        if np.isnan(v).any():
            continue
        if len(front) and (front <= v).all(axis=1).any():
            continue
        kept.append(i)
        front = np.vstack([front, v])
    return df.iloc[kept]


_NAMES = {"cost": ("cost_usd", "cheapest"), "time": ("time_to_train_s", "fastest"),
          "energy": ("energy_kwh", "least energy")}


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def why_lines(ranked, objective: str, pareto_index) -> list[str]:
    """What makes each of the ranked plans win: the leader's edge, the others' trade against it."""
    col, lead_word = _NAMES[objective]
    if col not in ranked or ranked[col].isna().all():
        col, lead_word = "device_hours", "fewest device-hours"
    out = []
    best = ranked.iloc[0] if len(ranked) else None
    for i, (idx, row) in enumerate(ranked.iterrows()):
        if i == 0:
            head = f"{lead_word}" + (" (fewest device-hours)" if col == "cost_usd" else "")
        else:
            head = f"{_pct(row[col] / best[col] - 1)} {col.split('_')[0]} vs #1"
            dt = row["time_to_train_s"] / best["time_to_train_s"] - 1
            if col != "time_to_train_s" and abs(dt) >= 0.005:
                head += f", {_pct(dt)} time"
        parts = [head, f"MFU {row['mfu']:.0%}", f"bubble {row['bubble_fraction']:.0%}",
                 f"{row['memory_headroom_bytes'] / 2**30:.0f} GiB spare"]
        if "goodput" in row:
            parts.append(f"goodput {row['goodput']:.1%} (checkpoint every {row['checkpoint_interval_s'] / 60:.0f} min)")
        if idx in pareto_index:
            parts.append("on the time/cost/energy front")
        out.append("; ".join(parts))
    return out
