"""Sweep figures (report/plot_sweep.py): what each cell / point shows, the PNG files, and clear errors."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simtrain.errors import SimtrainError
from simtrain.report.plot_sweep import scaling_curve, sweep_heatmap

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def df():
    """tp × micro-batch × zero (zero varies too, so each cell is the best over it); tp=4, mb=2 never fits."""
    rows = []
    for tp in (1, 2, 4):
        for mb in (1, 2):
            for zero in (0, 1):
                feasible = not (tp == 4 and mb == 2)
                rate = 100.0 * mb / tp + zero  # zero=1 is the better row of each cell
                rows.append({"micro_batch_size": mb, "tp": tp, "zero_stage": zero, "feasible": feasible,
                             "samples_per_s": rate if feasible else math.nan,
                             "step_time_s": 8.0 / rate if feasible else math.nan})
    return pd.DataFrame(rows)


def test_heatmap_cells_are_the_best_row_of_each_cell(df, tmp_path):
    fig = sweep_heatmap(df, "tp", "micro_batch_size", "samples_per_s", path=tmp_path / "h.png")
    cells = fig.axes[0].images[0].get_array()
    assert cells.shape == (2, 3)  # rows: micro-batch 1, 2; columns: tp 1, 2, 4
    assert cells[0].tolist() == [101.0, 51.0, 26.0] and cells[1, :2].tolist() == [201.0, 101.0]
    assert cells.mask[1, 2]  # no feasible point there: drawn as a grey ×
    assert "×" in [t.get_text() for t in fig.axes[0].texts]
    assert "best over zero_stage" in fig.axes[0].get_title()
    assert (tmp_path / "h.png").read_bytes()[:8] == PNG_MAGIC


def test_heatmap_of_step_time_takes_the_smallest(df):
    cells = sweep_heatmap(df, "tp", "micro_batch_size", "step_time_s").axes[0].images[0].get_array()
    assert cells[0, 0] == pytest.approx(8.0 / 101.0)


def test_scaling_curve_with_hue_and_ideal_line(df, tmp_path):
    fig = scaling_curve(df, "tp", "samples_per_s", hue="micro_batch_size", ideal=True, path=tmp_path / "c.png")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["micro_batch_size=2"].get_ydata()) == [201.0, 101.0]  # tp=4 has no feasible point
    assert list(lines["linear, micro_batch_size=1"].get_ydata()) == [101.0, 202.0, 404.0]
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_MAGIC


def test_plots_name_what_is_missing(df):
    with pytest.raises(SimtrainError, match="no column 'mfu'"):
        sweep_heatmap(df, "tp", "micro_batch_size", "mfu")
    with pytest.raises(SimtrainError, match="no feasible row"):
        scaling_curve(df.assign(feasible=False), "tp")
