"""What a calibration met on a noisy machine: the modes of the machine between passes, and how tightly its
paired benches pin the rates taken from them.

Modes
-----

Whether a calibration met the machine in more than one mode, and the profile of each mode (issue 12).

**Placement modes.** On this project's 2-core VM the whole machine switches between two states that
last minutes (the hypervisor's placement of the VM, by every sign: nothing of ours triggers it). In one,
a single-threaded 16 KiB ``torch.exp`` call — the framework's per-call path — takes 3.6–3.8 µs, a
128×784 @ 784×1024 GEMM 1.05 ms and a 64 MiB copy 3.1 ms; in the other 6.1–6.3 µs, 1.48 ms and 2.0 ms
(memory faster, the per-call path and mid-size GEMMs slower), and the medium MLP's training step
12.2 against 15.1 ms; a 256³ or 1024³ GEMM moves by 4 % at most. A calibration pass of ~3 minutes
meets both, group by group, and a step timed for seconds meets one. So the dispatch sentinel
(``sentinels.DISPATCH_BENCH``) closes every group: :func:`placement_modes` splits its readings in two
(the split of their logarithms with the largest between-mode variance, Otsu 1979) where the two modes'
medians are :data:`PLACEMENT_RATIO` apart or more; :func:`group_modes` names the mode of each group in
each pass (the readings that open and close it agree; else neither); :func:`modal_measurements`
re-centres every row on its passes in one mode, or on a stated mix of the two — a profile per mode,
which the validation suite compares with the steps timed in that mode; :func:`placement_mix`, what
``st.calibrate`` fits, re-centres every row on the mix its own passes met.

**Memory modes** (older, from the copies alone).

On this project's shared VM the copies past the last-level cache run in modes: a 256 MiB copy took
8.1–9.7 ms in five of twenty passes and 12.8–16.3 ms in the other fifteen, with the passes' order
deciding which mode a 10-pass set mostly met. The cache tier is fitted on those copies
(``fit_compute._cache_tier``), so a set that met mostly the fast mode prices every stream past the
cache for it: two such back-to-back sets put the wide MLP's update, the one step cost far past the
cache, 5.7 % apart, although each set's fit was sound. No fit can take that out; a calibration can
say it happened. :func:`memory_modes` reads it from the copies' pass medians, and ``simtrain
calibrate`` warns (the profile is kept).

Paired benches
--------------

How tightly a calibration's paired benches pin the rates taken from them.

Three CPU mechanisms are fitted from the difference of two timings of the same work: the NCHW layout
reorders (an NCHW convolution against its NHWC twin, bench_memory.py), the first touch of fresh pages
(fresh buffers against reused ones, bench_memory.py) and the in-step costs (an op after a gap of
other work against the same op back to back, bench_memory.py). A difference of two times carries both
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
from dataclasses import dataclass, replace

import numpy as np

from simtrain.calibrate.bench_memory import fit_conv_layout, fit_first_touch, fit_step_state
from simtrain.calibrate.fit_compute import CACHE_BENCH
from simtrain.calibrate.records import Measurements, Row
from simtrain.calibrate.robust import DISPATCH_BENCH, pass_centre
from simtrain.report.format import format_quantity

__all__ = ["memory_modes", "modes_line", "MODE_RATIO", "PLACEMENT_RATIO", "PlacementModes", "split_modes",
           "placement_modes", "row_groups", "group_modes", "modal_measurements", "placement_mix",
           "placement_line", "PairedFit", "PAIRED_FITS", "paired_fit", "paired_ranges", "wide_ranges",
           "WIDE_RATIO"]


# ──── Modes ─────────────────────────────────────────────────────────────────────────────────────────

PLACEMENT_RATIO = 1.3
"""Slow-mode over fast-mode median of the dispatch readings from which they count as two modes. Within
one mode the readings spread by 5 % here; the two modes were 1.6–1.7× apart in three sessions."""


@dataclass(frozen=True)
class PlacementModes:
    """The dispatch sentinel's readings split into a fast and a slow mode."""

    fast_s: float
    """Median of the fast mode's readings (seconds per call)."""
    slow_s: float
    """Median of the slow mode's readings."""
    threshold_s: float
    """A reading above this is in the slow mode: the geometric middle of the two medians."""
    slow_readings: int
    readings: int

    @property
    def ratio(self) -> float:
        return self.slow_s / self.fast_s

    @property
    def slow_fraction(self) -> float:
        """Share of the readings in the slow mode: the mix the calibration met."""
        return self.slow_readings / self.readings

    def is_slow(self, seconds: float) -> bool:
        return seconds > self.threshold_s

    @classmethod
    def from_dict(cls, d: dict) -> PlacementModes:
        """The inverse of :meth:`to_dict` (its derived ``ratio`` and ``slow_fraction`` are ignored)."""
        return cls(d["fast_s"], d["slow_s"], d["threshold_s"], d["slow_readings"], d["readings"])

    def to_dict(self) -> dict:
        return {"fast_s": self.fast_s, "slow_s": self.slow_s, "threshold_s": self.threshold_s, "ratio": self.ratio,
                "slow_readings": self.slow_readings, "readings": self.readings, "slow_fraction": self.slow_fraction}


def split_modes(readings_s: Sequence[float], ratio: float = PLACEMENT_RATIO) -> PlacementModes | None:
    """Two modes of ``readings_s`` (module docstring), or None: fewer than four positive readings, or
    the two sides' medians less than ``ratio`` apart."""
    x = np.sort(np.log([v for v in readings_s if v > 0]))
    n = x.size
    if n < 4:
        return None
    # Otsu: the split maximising the between-class variance w0 * w1 * (mu0 - mu1)^2
    csum = np.cumsum(x)
    k = np.arange(1, n)
    mu0, mu1 = csum[:-1] / k, (csum[-1] - csum[:-1]) / (n - k)
    split = int(k[np.argmax(k * (n - k) * (mu1 - mu0) ** 2)])
    fast, slow = float(np.median(np.exp(x[:split]))), float(np.median(np.exp(x[split:])))
    if slow < ratio * fast:
        return None
    return PlacementModes(fast, slow, math.sqrt(fast * slow), n - split, n)


def _dispatch_rows(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.bench == DISPATCH_BENCH]


def _pass_values(r: Row) -> tuple[float, ...]:
    return r.pass_medians_s or (r.median_s,)


def placement_modes(rows: Sequence[Row], ratio: float = PLACEMENT_RATIO) -> PlacementModes | None:
    """The modes of every dispatch reading of a measurement (each group's, in each pass), or None."""
    return split_modes([v for r in _dispatch_rows(rows) for v in _pass_values(r)], ratio)


def row_groups(rows: Sequence[Row]) -> list[str | None]:
    """Per row, the group whose closing dispatch reading follows it (``st.measure`` lays a pass out as
    the opening sentinels, the engine row, then each group's rows and its closing sentinels, and merged
    passes keep that order); None for sentinels and for rows after the last reading (collectives)."""
    out: list[str | None] = [None] * len(rows)
    pending: list[int] = []
    for i, r in enumerate(rows):
        if r.bench == DISPATCH_BENCH:
            for j in pending:
                out[j] = str(r.params.get("after"))
            pending = []
        elif not r.bench.startswith("sentinel_"):
            pending.append(i)
    return out


def group_modes(rows: Sequence[Row], modes: PlacementModes) -> dict[str, tuple[bool | None, ...]]:
    """Per group, per pass: True (slow mode), False (fast) or None (its opening and closing dispatch
    readings disagree: the mode changed while it ran). The opening reading is the previous group's
    closing one (the pass's opening reading for the first group)."""
    readings = _dispatch_rows(rows)
    out: dict[str, tuple[bool | None, ...]] = {}
    for before, after in zip(readings[:-1], readings[1:], strict=True):
        a, b = _pass_values(before), _pass_values(after)
        if len(a) != len(b):
            continue
        out[str(after.params.get("after"))] = tuple(modes.is_slow(x) if modes.is_slow(x) == modes.is_slow(y) else None
                                                    for x, y in zip(a, b, strict=True))
    return out


def modal_measurements(m: Measurements, modes: PlacementModes, slow_share: float) -> Measurements:
    """``m`` with every row of a compute group re-centred as ``slow_share`` × its centre over the passes
    the group ran in the slow mode + (1 − ``slow_share``) × its centre over the fast ones
    (``robust.pass_centre`` of each side): 1.0 is the slow mode's profile, 0.0 the fast mode's, and
    ``modes.slow_fraction`` the mix the calibration met, weighed the same for every row. A re-centred row
    keeps the pass medians of its one mode (two or more) for the paired fits, and none for a mix. A row
    whose group did not run in both modes keeps its centre and passes; rows of no group (collectives,
    rank jitter) are unchanged."""
    if not 0.0 <= slow_share <= 1.0:
        raise ValueError(f"slow_share must be within [0, 1], got {slow_share}")
    labels = group_modes(m.rows, modes)
    rows = []
    for r, g in zip(m.rows, row_groups(m.rows), strict=True):
        tags = labels.get(g) if g is not None else None
        values = r.pass_medians_s
        if tags is None or values is None or len(values) != len(tags):
            rows.append(r)
            continue
        slow = [v for v, t in zip(values, tags, strict=True) if t is True]
        fast = [v for v, t in zip(values, tags, strict=True) if t is False]
        if not (slow and fast):
            rows.append(r)
            continue
        centre = slow_share * pass_centre(slow) + (1.0 - slow_share) * pass_centre(fast)
        # the paired fits (below) read each pass's median, not the centre: one mode keeps
        # only its passes; a mix has no passes of its own, so its pairs are fitted on the centres
        kept = tuple(slow) if slow_share == 1.0 else tuple(fast) if slow_share == 0.0 else ()
        rows.append(replace(r.at_median(centre), pass_medians_s=kept if len(kept) > 1 else None))
    return Measurements(tuple(rows), m.machine, {**m.settings, "placement_slow_share": slow_share}, m.unsupported,
                        wall_s=m.wall_s)


def placement_mix(m: Measurements) -> tuple[Measurements, PlacementModes | None]:
    """What ``st.calibrate`` fits: ``m`` re-centred on the mix of placement modes its own dispatch
    readings met (:func:`modal_measurements` at ``slow_fraction``), and the modes; ``m`` itself and None
    where it met one mode, and ``m`` unchanged where it is re-centred already (``placement_slow_share``
    in its settings: a profile per mode asked for explicitly).

    Why: the trimmed mean over passes weighs the modes by however often each row's own passes met
    them, which differs from row to row by chance; the mix weighs them alike for every row. Twenty
    fresh passes dealt out in turn into two calibrations: every model's prediction 2.8 % apart at most
    (mean 0.8 %) against 7.1 % (mean 2.8 %) with the trimmed mean alone (docs/own-device.md)."""
    modes = placement_modes(m.rows)
    if modes is None or "placement_slow_share" in m.settings:
        return m, modes
    return modal_measurements(m, modes, modes.slow_fraction), modes


def placement_line(modes: PlacementModes) -> str:
    """One sentence for a report or a warning."""
    return (f"the machine ran in two modes (the 16 KiB exp call {modes.fast_s * 1e6:.2f} against "
            f"{modes.slow_s * 1e6:.2f} µs, {modes.ratio:.2f}x), {modes.slow_readings} of {modes.readings} "
            "dispatch readings in the slow one")

MODE_RATIO = 1.4
"""Slowest over fastest pass of the copies past the cache at which the passes count as two modes.
Within one mode the passes' speeds spread by 3–20 % here; the two modes were 1.5–1.9× apart."""


def memory_modes(rows: Sequence[Row], cache_bytes: float, ratio: float = MODE_RATIO) -> tuple[float, int, int] | None:
    """(slow over fast, passes in the slow mode, passes) where the copy rows moving more than
    ``cache_bytes`` ran ``ratio`` or more times slower in their slowest pass than in their fastest;
    None where they did not, or the rows keep no pass medians (a single pass), or fewer than three.
    A pass's speed is the median over those copies of its time over the row's median over the passes;
    a pass is in the slow mode when its speed is above the geometric middle of the two extremes."""
    copies = [r for r in rows if r.bench == CACHE_BENCH and r.bytes_moved > cache_bytes and r.pass_medians_s]
    counts = {len(r.pass_medians_s) for r in copies}
    if len(counts) != 1 or (n := counts.pop()) < 3:
        return None
    centre = [statistics.median(r.pass_medians_s) for r in copies]
    speed = [statistics.median(r.pass_medians_s[k] / c for r, c in zip(copies, centre, strict=True)) for k in range(n)]
    fast, slow = min(speed), max(speed)
    if slow < ratio * fast:
        return None
    middle = math.sqrt(fast * slow)
    return slow / fast, sum(s > middle for s in speed), n


def modes_line(modes: Sequence[float]) -> str:
    """The warning ``simtrain calibrate`` prints for :func:`memory_modes`' result."""
    spread, slow, n = modes
    return (f"the copies past the cache ran in two modes {spread:.2f}x apart ({int(slow)} of {int(n)} passes slow): "
            "the memory system changed between passes, and the profile prices streams past the cache for the mix "
            "it met; a calibration that meets another mix moves the predictions of models with such streams "
            "(a wide layer's optimizer update) by several percent")


# ──── Paired benches ────────────────────────────────────────────────────────────────────────────────

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
