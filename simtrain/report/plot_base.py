"""Shared plumbing of the figures: a headless matplotlib (Agg), one palette, save-to-path.

Figures are built with the object API (``matplotlib.figure.Figure``), never ``pyplot``: no global
state, no window, nothing left open between calls, so tests and servers can draw in parallel.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.errors import SimtrainError
from simtrain.outputs import IMAGE_SUFFIXES, check_output_path

__all__ = ["new_figure", "finish", "PALETTE", "MEMORY_COLOURS", "BREAKDOWN_COLOURS"]

#: colour-blind-safe (Okabe & Ito 2008, "Color Universal Design") categorical palette
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

BREAKDOWN_COLOURS = {"compute": PALETTE[0], "recompute": PALETTE[5], "comm_exposed": PALETTE[3],
                     "pipeline_bubble": PALETTE[1], "data_stall": PALETTE[4], "optimizer": PALETTE[2],
                     "interference": PALETTE[6], "idle_gaps": "#999999", "host_gaps": "#bbbbbb",
                     "stragglers": PALETTE[7]}

MEMORY_COLOURS = {"params": PALETTE[0], "grads": PALETTE[5], "optimizer": PALETTE[2],
                  "activations": PALETTE[1], "buffers": PALETTE[4], "overhead": "#999999",
                  "reserve": "#cccccc"}


def new_figure(width_in: float = 7.5, height_in: float = 4.5):
    """(figure, axes) on the Agg canvas: no display needed, nothing registered with pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width_in, height_in), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def finish(fig, path: str | Path | None):
    """Save ``fig`` to ``path`` (format from its suffix, one of :data:`~simtrain.outputs.IMAGE_SUFFIXES`:
    a path without one is refused, never written as ``path.png``) when given; return ``fig``."""
    if path is not None:
        target = check_output_path(path, "path", IMAGE_SUFFIXES)
        try:
            fig.savefig(target, format=target.suffix.lstrip(".").lower())
        except (OSError, ValueError) as err:
            raise SimtrainError(f"{target}: cannot write the figure: {err}") from err
    return fig
