"""How tightly a calibration's paired benches pin the rates taken from them.

Three CPU mechanisms are fitted from the difference of two timings of the same work: the NCHW layout
reorders (an NCHW convolution against its NHWC twin, bench_layout.py), the first touch of fresh pages
(fresh buffers against reused ones, bench_memory.py) and the in-step costs (an op after a gap of
other work against the same op back to back, bench_cold.py). A difference of two times carries both
sides' noise: where it is a fifth of either side, 5 % on one side is 25 % on the rate. Two
back-to-back calibrations of this project's shared VM, 10 passes each, put the layout rate at 13.7
and 18.8 GB/s and the cold streaming rate at 26 and 35 GB/s while their benchmarks' medians moved
0–3 % (validation/results/runs.md, repeatability-passes10-run4).

:func:`paired_fit` fits each mechanism pass by pass where the rows keep each pass's median, so the
two sides of a pair share that pass's machine, and keeps the median over the passes. On twenty
fresh passes this took two consecutive 10-pass calibrations' layout rates from 17.1 and 20.1 GB/s
(each side's median over the passes apart) to 18.0 and 18.7
(validation/results/runs.md, repeatability-drift2-2x10).

:func:`paired_ranges` re-runs each mechanism's own fit with the two sides of every pair moved to the
ends of their 95 % intervals (``Row.ci_low_s`` / ``ci_high_s``): the minuend low and the subtrahend
high gives the smallest difference, the reverse the largest. The range of each fitted value over
the two is what the paired timings allow; a wide one says the profile's value is one draw of it.
Each side's interval is a 95 % one, so the pair at opposite ends is a conservative range, not a
confidence interval of its own.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from simtrain.calibrate.bench_cold import fit_step_state
from simtrain.calibrate.bench_layout import fit_conv_layout
from simtrain.calibrate.bench_memory import fit_first_touch
from simtrain.calibrate.records import Row
from simtrain.report.format import format_quantity

__all__ = ["PairedFit", "PAIRED_FITS", "paired_fit", "paired_ranges", "wide_ranges", "WIDE_RATIO"]


@dataclasses.dataclass(frozen=True)
class PairedFit:
    bench: str
    flag: str
    """The param that is True on the pair's minuend (the slower side by construction)."""
    fit: Callable[[Sequence[Row]], dict[str, float]]


PAIRED_FITS = (PairedFit("conv_layout", "nchw", fit_conv_layout),
               PairedFit("first_touch", "fresh", fit_first_touch),
               PairedFit("step_state", "cold", fit_step_state))

WIDE_RATIO = 1.5
"""A range whose high end is more than this many times its low end is reported as wide."""


def _passes(rows: Sequence[Row], bench: str) -> int:
    """How many passes every row of ``bench`` keeps its own median of (0 unless all keep the same
    number, at least 2)."""
    counts = {len(r.pass_medians_s) if r.pass_medians_s is not None else 0 for r in rows if r.bench == bench}
    return counts.pop() if len(counts) == 1 and min(counts) >= 2 else 0


def _no_cost(name: str) -> float:
    """A fitted quantity's value where its pair measured nothing: an infinite rate, a zero cost."""
    return math.inf if name.endswith("_per_s") else 0.0


def _pass(rows: Sequence[Row], bench: str, k: int) -> list[Row]:
    """``rows`` with ``bench``'s rows at their ``k``-th pass's median."""
    return [r.at_median(r.pass_medians_s[k]) if r.bench == bench else r for r in rows]


def paired_fit(rows: Sequence[Row], pf: PairedFit) -> dict[str, float]:
    """``pf``'s fit, its two sides paired within each pass where the rows keep their passes' medians:
    the median over the passes of each pass's fitted value (a pass where the pair measured no cost
    counts as an infinite rate or a zero cost; a rate whose median is infinite is left out, as the fit
    leaves out a pair that measured nothing). A machine that drifts between passes moves both sides of
    a pass alike, while the median of each side over the passes may come from different passes."""
    n = _passes(rows, pf.bench)
    if n == 0:
        return pf.fit(rows)
    per_pass = [pf.fit(_pass(rows, pf.bench, k)) for k in range(n)]
    out = {}
    for name in sorted({key for fitted in per_pass for key in fitted}):
        value = statistics.median(f.get(name, _no_cost(name)) for f in per_pass)
        if math.isfinite(value):
            out[name] = value
    return out


def _moved(rows: Sequence[Row], pf: PairedFit, minuend_low: bool) -> list[Row]:
    """``rows`` with the bench's sides at the ends of their intervals: the minuend at its low end and
    the subtrahend at its high end (``minuend_low``), or the reverse. Rows without an interval stay."""
    def end(r: Row) -> float:
        return r.ci_low_s if bool(r.params.get(pf.flag)) == minuend_low else r.ci_high_s
    return [r.at_median(end(r)) if r.bench == pf.bench and r.ci_low_s is not None and r.ci_high_s is not None else r
            for r in rows]


def paired_ranges(rows: Sequence[Row]) -> dict[str, tuple[float, float, float]]:
    """Each paired mechanism's fitted value and the range its paired timings allow: ``{name: (value,
    low, high)}``. A bound the moved rows cannot fit at all (no pair left slower on its minuend side)
    is 0 for a cost and ``inf`` for a rate: the timings do not tell it from zero cost."""
    out: dict[str, tuple[float, float, float]] = {}
    for pf in PAIRED_FITS:
        value = paired_fit(rows, pf)
        if not value:
            continue
        ends = [pf.fit(_moved(rows, pf, minuend_low)) for minuend_low in (True, False)]
        for name, v in value.items():
            got = [e.get(name, _no_cost(name)) for e in ends]
            out[name] = (v, min(got + [v]), max(got + [v]))
    return out


def wide_ranges(ranges: dict[str, tuple[float, float, float]], ratio: float = WIDE_RATIO) -> list[str]:
    """One line per range wider than ``ratio`` (high over low; a zero low end is always wide)."""
    lines = []
    for name, (v, lo, hi) in ranges.items():
        if lo <= 0 or hi / lo > ratio:
            lines.append(f"{name} = {format_quantity(v, name)}, but its paired timings allow "
                         f"{format_quantity(lo, name)} to {format_quantity(hi, name)}: a re-measure may move it "
                         "that far, and the predictions that depend on it with it")
    return lines
