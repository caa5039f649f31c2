"""Predicted against measured: one point per case on log-log axes, the y = x line and ±10 % bands."""

from __future__ import annotations

from simtrain.errors import SimtrainError, SpecError
from simtrain.report.plot_base import PALETTE, finish, new_figure

__all__ = ["predicted_vs_measured", "validation_frame"]

BAND_FRACTION = 0.10
"""Half-width of the shaded band: ±10 %, the error simtrain's validation suite aims at (README)."""


_MARKERS = ("o", "s", "^", "D", "v", "P")
"""Marker shapes, one per pass through the colour palette."""

def validation_frame(results):
    """A DataFrame (case, metric, predicted, measured) from a validation result: the JSON dict
    ``python -m validation`` writes (its ``cases``), a path to it, or a DataFrame already."""
    from pathlib import Path

    import pandas as pd
    if isinstance(results, pd.DataFrame):
        return results
    name = None
    if isinstance(results, (str, Path)):  # untrusted: a regular, size-capped file of strict JSON
        from simtrain.specs.reading import read_json_file
        name = str(results)
        results = read_json_file(results, limit=64 * 2**20, what="validation results")
    cases = results.get("cases", results) if isinstance(results, dict) else results
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise SpecError.one(name, "cases", "not validation results: expected a list of cases (objects) or an "
                            "object with 'cases'")
    return pd.DataFrame([{k: c.get(k) for k in ("case", "metric", "predicted", "measured")} for c in cases])


def predicted_vs_measured(df, *, metric: str | list[str] | None = None, title: str | None = None,
                          unit: str = "", path=None):
    """Figure: each row's ``predicted`` against its ``measured`` (columns of ``df``; one colour per
    ``metric`` when the column exists), with y = x and the ±10 % band; the title gives the mean
    absolute percentage error. ``metric`` (a name or a list) keeps only those metrics' rows: metrics in
    different units (seconds, FLOPs, bytes) share a log-log plot but not a scale; ``unit`` labels the axes."""
    df = validation_frame(df)
    missing = {"predicted", "measured"} - set(df.columns)
    if missing:
        raise SimtrainError(f"predicted_vs_measured needs columns {sorted(missing)}")
    if metric is not None and "metric" in df.columns:
        df = df[df["metric"].isin([metric] if isinstance(metric, str) else list(metric))]
    df = df[(df["predicted"] > 0) & (df["measured"] > 0)]
    if df.empty:
        raise SimtrainError("no rows with positive predicted and measured values to plot")
    fig, ax = new_figure(5.5, 5.0)
    groups = df.groupby("metric", sort=True) if "metric" in df.columns else [("all", df)]
    for i, (name, part) in enumerate(groups):
        # past the palette's length the marker changes, so no two groups share colour and shape
        ax.scatter(part["measured"], part["predicted"], s=30, color=PALETTE[i % len(PALETTE)],
                   marker=_MARKERS[(i // len(PALETTE)) % len(_MARKERS)],
                   edgecolor="black", linewidth=0.4, label=str(name), zorder=3)
    lo = min(df["measured"].min(), df["predicted"].min()) / 1.5
    hi = max(df["measured"].max(), df["predicted"].max()) * 1.5
    xs = [lo * (hi / lo) ** (k / 50) for k in range(51)]
    ax.plot(xs, xs, color="black", lw=1, label="y = x")
    ax.fill_between(xs, [x * (1 - BAND_FRACTION) for x in xs], [x * (1 + BAND_FRACTION) for x in xs],
                    color="grey", alpha=0.2, label="±10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    mape = 100 * float(((df["predicted"] - df["measured"]).abs() / df["measured"]).mean())
    ax.set_xlabel(f"measured{f' ({unit})' if unit else ''}")
    ax.set_ylabel(f"predicted{f' ({unit})' if unit else ''}")
    ax.set_title(title or f"predicted vs measured: {len(df)} cases, MAPE {mape:.1f}%", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    return finish(fig, path)

