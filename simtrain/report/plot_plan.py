"""The figure of a capacity plan: time to train vs cost of every layout that meets the constraints,
the Pareto front (time / cost / energy) joined, points coloured by energy, the top-ranked plan marked."""

from __future__ import annotations

import numpy as np

from simtrain.errors import SimtrainError
from simtrain.report.plot_base import PALETTE, finish, new_figure

__all__ = ["plot_plan"]


def plot_plan(plan_df, path=None, *, title: str | None = None):
    """A scatter of ``st.plan``'s result: its ranked rows and ``attrs["pareto"]`` (time in days on x,
    US dollars — or device-hours when the device has no price — on y). Returns the Figure."""
    front = plan_df.attrs.get("pareto")
    if plan_df.empty or front is None or front.empty:
        raise SimtrainError("plot_plan: the plan is empty (nothing meets the constraints); see "
                            "df.attrs['explanation']")
    cost = "cost_usd" if plan_df["cost_usd"].notna().any() else "device_hours"
    label = "cost (US$)" if cost == "cost_usd" else "device-hours"
    fig, ax = new_figure(7.5, 4.8)
    scale = 1e6 if cost == "cost_usd" else 1.0
    label = "cost (million US$)" if cost == "cost_usd" else label
    every = plan_df.attrs.get("candidates")
    if every is not None and not every.empty:
        ax.scatter(every["time_to_train_days"], every[cost] / scale, s=6, color="#bbbbbb", alpha=0.5,
                   label=f"all {len(every)} layouts meeting the constraints")
    pts = _points(plan_df, front)
    energy = pts["energy_kwh"].to_numpy(dtype=float) / 1e3
    sc = ax.scatter(pts["time_to_train_days"], pts[cost] / scale, c=energy if np.isfinite(energy).all() else PALETTE[5],
                    cmap="viridis", s=22, alpha=0.8, label="top layouts and front")
    if np.isfinite(energy).all():
        fig.colorbar(sc, ax=ax, label="energy (MWh)")
    f = front.sort_values("time_to_train_s")
    ax.plot(f["time_to_train_days"], f[cost] / scale, color=PALETTE[3], lw=1.2, marker="o", ms=4, mfc="none",
            label="Pareto front (time, cost, energy)")
    best = plan_df.iloc[0]
    ax.scatter([best["time_to_train_days"]], [best[cost] / scale], marker="*", s=180, color=PALETTE[1], zorder=5,
               label=f"#1: {int(best['devices'])} devices, tp={best['tp']} pp={best['pp']} dp={best['dp']}")
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or "capacity plan: time vs cost", fontsize=10)
    return finish(fig, path)


def _points(plan_df, front):
    import pandas as pd
    cols = ["time_to_train_days", "cost_usd", "device_hours", "energy_kwh"]
    return pd.concat([plan_df[cols], front[cols]], ignore_index=True)
