"""calibrate/modes.py: the range of a paired bench's rate its two sides' intervals allow."""

from __future__ import annotations

import math

import pytest

from simtrain.calibrate.modes import paired_ranges, wide_ranges
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
    """The CLI keeps the profile and names each loosely pinned rate with its range, in its own units,
    then the memory modes the fit record holds (none: no line)."""
    from simtrain.cli.calibrate import _warn_fit
    ranges = {"conv_layout_bytes_per_s": [1.37e10, 9.27e9, 3.26e10], "first_touch_bytes_per_s": [3.8e9, 3.3e9, 4.4e9]}
    _warn_fit({"paired_ranges": ranges, "memory_modes": []})
    err = capsys.readouterr().err.splitlines()
    assert err == ["calibrate: warning: conv_layout_bytes_per_s = 13.7 GB/s, but its paired timings allow 9.27 GB/s "
                   "to 32.6 GB/s: a re-measure may move it that far, and the predictions that depend on it with it"]
    _warn_fit({"paired_ranges": ranges, "memory_modes": [1.75, 4, 5]})
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "two modes 1.75x apart (4 of 5 passes slow)" in err[1]


def _per_pass(nchw: bool, passes_s: tuple[float, ...]) -> Row:
    import statistics
    m = statistics.median(passes_s)
    return Row("conv_layout", None, DType.FP32, dict(_PARAMS, nchw=nchw), 0.0, 0.0, m, min(passes_s), max(passes_s),
               15, pass_medians_s=passes_s)


def test_pairs_are_taken_within_each_pass_by_hand():
    """Passes of NCHW 3.0 / 5.0 / 3.2 ms against NHWC 2.0 / 4.0 / 2.1 ms (the second pass a slow spell on
    both sides): each pass's difference 1.0, 1.0, 1.1 ms, median 1.0 ms, so 49152 B / 1.0 ms; the
    medians of the two sides apart (3.2 − 2.1 = 1.1 ms) would give 49152 B / 1.1 ms."""
    from simtrain.calibrate.bench_memory import fit_conv_layout
    from simtrain.calibrate.modes import PAIRED_FITS, paired_fit
    layout = next(pf for pf in PAIRED_FITS if pf.bench == "conv_layout")
    rows = [_per_pass(True, (3.0e-3, 5.0e-3, 3.2e-3)), _per_pass(False, (2.0e-3, 4.0e-3, 2.1e-3))]
    assert paired_fit(rows, layout) == {"conv_layout_bytes_per_s": pytest.approx(_BYTES / 1.0e-3)}
    assert fit_conv_layout(rows) == {"conv_layout_bytes_per_s": pytest.approx(_BYTES / 1.1e-3)}
    # a pass whose NCHW side was not slower measured no cost: an infinite rate, one vote of three
    one = [_per_pass(True, (3.0e-3, 1.9e-3, 3.4e-3)), _per_pass(False, (2.0e-3, 2.0e-3, 2.2e-3))]
    assert paired_fit(one, layout) == {"conv_layout_bytes_per_s": pytest.approx(_BYTES / 1.0e-3)}
    # two of three: the median rate is infinite, the reorder not costed (as the fit without passes does)
    two = [_per_pass(True, (3.0e-3, 1.9e-3, 1.8e-3)), _per_pass(False, (2.0e-3, 2.0e-3, 2.2e-3))]
    assert paired_fit(two, layout) == {}
    # sides that kept different numbers of passes are not paired: the plain fit
    odd = [_per_pass(True, (3.0e-3, 5.0e-3, 3.2e-3)), _per_pass(False, (2.0e-3, 4.0e-3))]
    assert paired_fit(odd, layout) == fit_conv_layout(odd)


def test_merged_rows_keep_each_pass_median_and_single_rows_serialise_as_before():
    from simtrain.calibrate.robust import merge_passes
    one = _layout(True, 3.0e-3, 2.8e-3, 3.2e-3)
    assert "pass_medians_s" not in one.to_dict()  # so older files keep their hash
    merged = merge_passes([[one], [_layout(True, 5.0e-3, 4.0e-3, 6.0e-3)], [_layout(True, 3.2e-3, 3.0e-3, 3.4e-3)]])
    assert merged[0].pass_medians_s == (3.0e-3, 5.0e-3, 3.2e-3) and merged[0].median_s == 3.2e-3
    back = Row.from_dict(merged[0].to_dict())
    assert back == merged[0] and back.to_dict()["pass_medians_s"] == [3.0e-3, 5.0e-3, 3.2e-3]
