"""simtrain's figures, one import away: ``from simtrain.report import plot``.

Every function returns a ``matplotlib.figure.Figure`` drawn on the headless Agg canvas (never a
window, never ``pyplot`` state) and takes ``path=`` to save it (PNG, SVG or PDF by the suffix):

* :func:`roofline` — a device's roofline with a model's ops placed on it;
* :func:`breakdown` — where one step's time goes (StepReport.time_breakdown_s);
* :func:`memory_stack` — per-rank memory stacked against capacity;
* :func:`gantt` — the pipeline timeline of a simulated step;
* :func:`predicted_vs_measured` — validation scatter with y = x and ±10 % bands;
* :func:`compare_bar` — one workload across hardware (``st.compare``'s DataFrame).
"""

from __future__ import annotations

from simtrain.report.plot_compare import compare_bar
from simtrain.report.plot_roofline import op_points, roofline
from simtrain.report.plot_step import breakdown, gantt, memory_stack, stage_memory_reports
from simtrain.report.plot_validation import predicted_vs_measured, validation_frame

__all__ = ["roofline", "op_points", "breakdown", "memory_stack", "stage_memory_reports", "gantt",
           "predicted_vs_measured", "validation_frame", "compare_bar", "KINDS"]

#: the figure kinds ``simtrain plot KIND`` draws
KINDS = ("roofline", "breakdown", "memory", "gantt", "validation")
