"""calibrate/paired.py: the range of a paired bench's rate its two sides' intervals allow."""

from __future__ import annotations

import math

import pytest

from simtrain.calibrate.paired import paired_ranges, wide_ranges
from simtrain.calibrate.records import Row
from simtrain.glossary import DType

_PARAMS = {"n": 2, "c": 64, "h": 8, "w": 8, "k": 32, "r": 1, "s": 1, "stride": 1, "pad": 0, "groups": 1, "p": 8, "q": 8}
_BYTES = 49152.0
"""Activation bytes of that conv: 2·64·8·8 + 2·32·8·8 = 12288 fp32 elements."""


def _layout(nchw: bool, median_s: float, low_s: float | None, high_s: float | None) -> Row:
    return Row("conv_layout", None, DType.FP32, dict(_PARAMS, nchw=nchw), 0.0, 0.0, median_s, median_s, median_s, 5,
               ci_low_s=low_s, ci_high_s=high_s)


def test_layout_rate_range_from_the_pair_at_opposite_ends_by_hand():
    """NCHW 3.0 ms (2.8–3.2), NHWC 2.0 ms (1.9–2.1): the difference 1.0 ms, at least 2.8 − 2.1 = 0.7 ms
    and at most 3.2 − 1.9 = 1.3 ms, so the rate 49152 B / 1.0 ms within 49152 / 1.3 ms … 49152 / 0.7 ms."""
    rows = [_layout(True, 3.0e-3, 2.8e-3, 3.2e-3), _layout(False, 2.0e-3, 1.9e-3, 2.1e-3)]
    v, lo, hi = paired_ranges(rows)["conv_layout_bytes_per_s"]
    assert v == pytest.approx(_BYTES / 1.0e-3)
    assert lo == pytest.approx(_BYTES / 1.3e-3) and hi == pytest.approx(_BYTES / 0.7e-3)
    # 1.3 / 0.7 = 1.86 > 1.5: wide, named with its range
    assert len(wide_ranges(paired_ranges(rows))) == 1
    assert "conv_layout_bytes_per_s" in wide_ranges(paired_ranges(rows))[0]
    assert wide_ranges(paired_ranges(rows), ratio=2.0) == []


def test_overlapping_sides_leave_the_rate_unbounded_above():
    """NCHW 2.2 ms (2.0–2.4) against NHWC 2.0 ms (1.9–2.1): at opposite ends the NCHW side is not slower,
    the pair measures nothing, and the rate may be anything up to infinity (no cost at all)."""
    rows = [_layout(True, 2.2e-3, 2.0e-3, 2.4e-3), _layout(False, 2.0e-3, 1.9e-3, 2.1e-3)]
    v, lo, hi = paired_ranges(rows)["conv_layout_bytes_per_s"]
    assert v == pytest.approx(_BYTES / 0.2e-3) and lo == pytest.approx(_BYTES / 0.5e-3) and math.isinf(hi)
    assert wide_ranges(paired_ranges(rows))


def test_rows_without_intervals_give_a_point_and_no_bench_gives_nothing():
    rows = [_layout(True, 3.0e-3, None, None), _layout(False, 2.0e-3, None, None)]
    assert paired_ranges(rows) == {"conv_layout_bytes_per_s": (_BYTES / 1.0e-3,) * 3}
    assert wide_ranges(paired_ranges(rows)) == []
    assert paired_ranges([]) == {}


def test_calibrate_command_warns_of_each_wide_range_on_stderr(capsys):
    """The CLI keeps the profile and names each loosely pinned rate with its range, in its own units."""
    from simtrain.cli.calibrate import _warn_wide
    _warn_wide({"conv_layout_bytes_per_s": [1.37e10, 9.27e9, 3.26e10], "first_touch_bytes_per_s": [3.8e9, 3.3e9, 4.4e9]})
    err = capsys.readouterr().err.splitlines()
    assert err == ["calibrate: warning: conv_layout_bytes_per_s = 13.7 GB/s, but its paired timings allow 9.27 GB/s "
                   "to 32.6 GB/s: a re-measure may move it that far, and the predictions that depend on it with it"]
