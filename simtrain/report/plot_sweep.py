"""Figures of a sweep (st.sweep's DataFrame): a heatmap over two grid keys, a scaling curve over one.

Only feasible rows are drawn; a cell or point whose rows are all infeasible shows as a grey ×. When
other grid keys vary too, each cell / point shows the best row over them (largest value, or smallest
for step time and memory), and the title says so.
"""

from __future__ import annotations

import math

from simtrain.errors import SimtrainError
from simtrain.report.format import format_percent, format_quantity, format_si
from simtrain.report.plot_base import PALETTE, finish, new_figure
from simtrain.report.sweep_table import LOWER_IS_BETTER

__all__ = ["sweep_heatmap", "scaling_curve"]


def _label(value: float, name: str) -> str:
    if name in ("mfu", "hfu"):
        return format_percent(value, 0)
    if name.endswith("_per_s") and format_quantity(value, name) == format_quantity(value, "x_s"):
        return format_si(value, "/s")  # samples_per_s, tokens_per_s: a rate, not a duration
    return format_quantity(value, name)


def _check(df, *columns: str) -> None:
    for c in columns:
        if c not in df.columns:
            raise SimtrainError(f"sweep plot: no column {c!r} in the sweep (columns: {', '.join(df.columns)})")
    if "feasible" not in df.columns or not df["feasible"].any():
        raise SimtrainError("sweep plot: no feasible row to draw")


def _sorted_values(values) -> list:
    uniq = list(dict.fromkeys(values))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniq)
    return sorted(uniq) if numeric else sorted(uniq, key=str)


def _best(df, by: list[str], value: str) -> dict:
    """{group values: best value over the feasible rows of the group} (NaN: none feasible)."""
    pick = min if value in LOWER_IS_BETTER else max
    out: dict = {}
    for keys, group in df.groupby(by, sort=False):
        ok = group.loc[group["feasible"], value].dropna()
        out[keys if isinstance(keys, tuple) else (keys,)] = pick(ok) if len(ok) else math.nan
    return out


def _title(df, value: str, over: list[str]) -> str:
    others = [c for c in over if df[c].nunique() > 1]
    tail = f" (best over {', '.join(others)})" if others else ""
    return f"{value}{tail}"


def sweep_heatmap(df, x: str, y: str, value: str = "samples_per_s", *, path=None):
    """Figure: ``value`` over the ``x`` × ``y`` grid, each cell annotated; brighter is better."""
    import numpy as np
    _check(df, x, y, value)
    xs, ys = _sorted_values(df[x].tolist()), _sorted_values(df[y].tolist())
    best = _best(df, [x, y], value)
    grid = np.array([[best.get((xv, yv), math.nan) for xv in xs] for yv in ys], dtype=float)
    fig, ax = new_figure(max(6.0, 1.6 + 0.9 * len(xs)), 1.6 + 0.55 * max(4, len(ys)))
    cmap = "viridis_r" if value in LOWER_IS_BETTER else "viridis"
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto", origin="lower")
    ax.set_facecolor("#eeeeee")
    lo, hi = np.nanmin(grid), np.nanmax(grid)
    for (i, j), cell in np.ndenumerate(grid):
        if math.isnan(cell):
            ax.text(j, i, "×", ha="center", va="center", color="#888888", fontsize=12)
            continue
        bright = (cell - lo) / (hi - lo) if hi > lo else 0.5
        bright = 1 - bright if value in LOWER_IS_BETTER else bright
        ax.text(j, i, _label(cell, value), ha="center", va="center", fontsize=8,
                color="black" if bright > 0.6 else "white")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    fig.colorbar(image, ax=ax, label=value)
    others = [c for c in df.columns if c not in (x, y) and _is_input(c)]
    ax.set_title(_title(df, value, others) + "\n× = no feasible point", fontsize=10)
    return finish(fig, path)


def _is_input(column: str) -> bool:
    from simtrain.search.sweep_rows import RESULT_COLUMNS
    return column not in RESULT_COLUMNS and column != "point_key"


def _log_axes(ax, ticks: list) -> None:
    # doublings of nodes / batch read best on log-log axes, where linear scaling is a straight line
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    plain = FuncFormatter(lambda v, _: format_si(v, "").strip())  # "2 k", not "2×10³"
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    # within a decade the minor ticks are the only labels; over several they would crowd the axis
    ax.yaxis.set_minor_formatter(plain if high < 10 * low else NullFormatter())
    if high >= 10 * low:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1-2-5: a label per third


def scaling_curve(df, x: str, value: str = "samples_per_s", *, hue: str | None = None, ideal: bool = False,
                  path=None):
    """Figure: ``value`` against ``x`` (one line per ``hue`` value when given). ``ideal`` adds the
    linear-scaling line through each curve's first point (value ∝ x), for node or device counts."""
    _check(df, x, value, *([hue] if hue else []))
    fig, ax = new_figure(7.5, 4.5)
    hues = _sorted_values(df[hue].tolist()) if hue else [None]
    missing = [f"{x}={v[0]}" for v, ok in _best(df, [x], value).items() if math.isnan(ok)]
    for n, h in enumerate(hues):
        part = df if h is None else df[df[hue] == h]
        best = _best(part, [x], value)
        xs = [v for v in _sorted_values(part[x].tolist()) if not math.isnan(best[(v,)])]
        if not xs:
            missing.append(f"{hue}={h}")
            continue
        ys = [best[(v,)] for v in xs]
        colour = PALETTE[n % len(PALETTE)]
        ax.plot(xs, ys, marker="o", color=colour, label=None if h is None else f"{hue}={h}")
        if ideal and isinstance(xs[0], (int, float)) and xs[0]:
            ax.plot(xs, [ys[0] * v / xs[0] for v in xs], ls="--", lw=1, color=colour,
                    label="linear scaling" if h is None else f"linear, {hue}={h}")
    from pandas.api.types import is_bool_dtype, is_numeric_dtype
    numeric = is_numeric_dtype(df[x]) and not is_bool_dtype(df[x])
    if numeric and df[x].min() > 0 and df[x].max() / df[x].min() >= 8:
        _log_axes(ax, _sorted_values(df[x].tolist()))
    ax.set_xlabel(x)
    ax.set_ylabel(value)
    ax.grid(True, alpha=0.3)
    if hue or ideal:
        ax.legend(fontsize=8, frameon=False)
    over = [c for c in df.columns if c not in (x, hue) and _is_input(c)]
    none = f"\nno feasible point at {', '.join(missing)}" if missing else ""
    ax.set_title(f"{_title(df, value, over)} vs {x}{none}", fontsize=10)
    return finish(fig, path)
