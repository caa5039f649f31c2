"""The cross-hardware figure: one panel per question (how fast, how well used, how much energy, how
much money), one bar per hardware row of ``st.compare``; rows that cannot run say why in place."""

from __future__ import annotations

import math

from simtrain.errors import SimtrainError
from simtrain.report.plot_base import PALETTE, finish

__all__ = ["compare_bar", "PANELS"]

#: (column, axis label, scale) of each panel
PANELS = (
    ("tokens_per_s", "tokens / s (whole job)", 1.0),
    ("mfu", "MFU (%)", 100.0),
    ("energy_per_mtoken_kwh", "device energy, kWh per M tokens", 1.0),
    ("cost_per_mtoken_dollars", "$ per M tokens (indicative price)", 1.0),
)


def _value(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def compare_bar(df, *, path=None):
    """Figure: four horizontal-bar panels (throughput, MFU, energy and cost per million tokens) over
    the rows of ``df`` (``st.compare``'s DataFrame). A row whose status is not "ok" is labelled with
    its status; a missing number (no TDP or price in the spec) is labelled "n/a"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter
    if df is None or len(df) == 0:
        raise SimtrainError("compare_bar needs at least one row")
    labels = [f"{h} ({d}×)" if _value(d) else str(h) for h, d in zip(df["hardware"], df["devices"], strict=True)]
    fig = Figure(figsize=(11.0, 1.6 + 0.45 * len(df)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(PANELS), sharey=True)
    ys = list(range(len(df)))
    for ax, (column, title, scale) in zip(axes, PANELS, strict=True):
        values = [_value(v) for v in df[column]]
        top = max((v * scale for v in values if v is not None), default=1.0) or 1.0
        for y, v, status in zip(ys, values, df["status"], strict=True):
            if v is None:
                ax.text(0.02 * top, y, "n/a" if status == "ok" else str(status), va="center", fontsize=7,
                        color="#666666")
                continue
            colour = PALETTE[0] if status == "ok" else "#bbbbbb"
            ax.barh([y], [v * scale], color=colour, edgecolor="black", linewidth=0.4)
            ax.text(v * scale, y, f" {v * scale:.3g}", va="center", fontsize=7)
        ax.set_xlim(0, top * 1.35)
        ax.set_ylim(len(df) - 0.4, -0.6)  # first row on top, last row clear of the axis
        if column == "tokens_per_s":  # 150k reads better than 1.5e5; fractions stay plain
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(ys, labels, fontsize=8)
    fig.suptitle("one workload across hardware (grey: does not fit)", fontsize=10)
    return finish(fig, path)
