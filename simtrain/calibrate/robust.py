"""Is a measurement trustworthy? Confidence intervals, contention detection, and the machine-speed sentinels
timed between benchmark groups.

Is a measurement trustworthy? Confidence intervals of timed samples and contention detection.

* **Confidence interval of a median**: percentile bootstrap (Efron & Tibshirani 1993, ch. 13): resample
  the n samples with replacement ``resamples`` times (fixed seed: deterministic), take each resample's
  median, report the 2.5th and 97.5th percentiles of those medians as the 95 % interval. No normality
  assumption, which step times on a shared machine (a long right tail) do not meet.
* **Contention**, from what Linux exposes (proc(5)):
  - *steal*: the ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq softirq steal …, in
    clock ticks); steal / total ticks between two readings is the share of time the hypervisor gave
    this VM's CPUs to someone else;
  - *other processes' CPU*: busy ticks (total − idle − iowait) between two readings, less this
    process's own CPU time (``os.times()``: user + system, children included), over cores × wall time;
  - *load*: the 1-minute load average against the core count;
  - *spread*: the relative width of each row's 95 % interval (or p90 / p10 where no interval was
    kept); many wide rows mean samples moved under the benchmark.
  A profile is *unreliable* when any of these is past its threshold (:class:`Thresholds`);
  ``simtrain calibrate`` then exits non-zero unless ``--allow-noisy``.

The sentinels timed between groups are in :mod:`simtrain.calibrate.sentinels` (their names re-exported
here).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from simtrain.calibrate.timing import median_ci

if TYPE_CHECKING:
    pass
from simtrain.calibrate.sentinels import (  # noqa: F401  (re-exported)
    DISPATCH_BENCH,
    DISPATCH_NUMEL,
    SENTINELS,
    STREAM_BYTES,
    Sentinel,
    dispatch_call,
    over_limit,
    quickest,
    slowdowns,
    take,
    worst_slowdown,
)

__all__ = ["merge_passes", "pass_centre", "TRIM_FRACTION", "merged_measurements", "median_ci",
           "median_order_interval", "CpuTicks", "read_cpu_ticks", "parse_cpu_ticks", "Snapshot", "snapshot",
           "Thresholds", "Contention", "assess", "contention_between", "row_spread",
           "measurements_contention", "benchmark_key", "Sentinel", "SENTINELS", "STREAM_BYTES",
           "DISPATCH_BENCH", "DISPATCH_NUMEL", "dispatch_call", "take", "quickest", "slowdowns",
           "worst_slowdown", "over_limit"]


# ──── Confidence intervals and contention ─────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class CpuTicks:
    """Aggregate ``cpu`` line of /proc/stat, in clock ticks."""

    total: float
    idle: float
    steal: float


def parse_cpu_ticks(text: str) -> CpuTicks | None:
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            v = [float(p) for p in parts[1:]]
            v += [0.0] * (8 - len(v))
            # guest time is already inside user / nice (proc(5)); summing the first 8 fields avoids double counting
            return CpuTicks(total=sum(v[:8]), idle=v[3] + v[4], steal=v[7])
    return None


def read_cpu_ticks(path: str | Path = "/proc/stat") -> CpuTicks | None:
    try:
        return parse_cpu_ticks(Path(path).read_text())
    except OSError:
        return None


@dataclass(frozen=True)
class Snapshot:
    """What :func:`contention_between` compares: CPU ticks, this process's CPU seconds, the clock."""

    ticks: CpuTicks | None
    own_cpu_s: float
    wall_s: float
    loadavg_1min: float | None


def snapshot() -> Snapshot:
    t = os.times()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return Snapshot(read_cpu_ticks(), t.user + t.system + t.children_user + t.children_system,
                    time.monotonic(), load)


@dataclass(frozen=True)
class Thresholds:
    steal_fraction: float = 0.05
    """Above 5 % of CPU time stolen by the hypervisor the clock under the benchmarks is not ours."""
    other_cpu_fraction: float = 0.25
    """Other processes using a quarter of the cores' time: the benchmark threads shared their cores."""
    load_per_core: float = 1.0
    """Load average above the core count: runnable threads were waiting for a core."""
    row_spread: float = 0.5
    """A row is wide when its 95 % interval (or p90 − p10) exceeds half its median …"""
    wide_rows_fraction: float = 0.2
    """… and the profile is noisy when more than a fifth of its rows are wide."""


@dataclass(frozen=True)
class Contention:
    steal_fraction: float | None
    other_cpu_fraction: float | None
    loadavg_1min: float | None
    cores: int
    wide_rows_fraction: float | None
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def reliable(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def contention_between(a: Snapshot, b: Snapshot, cores: int) -> tuple[float | None, float | None]:
    """(steal fraction, other processes' CPU fraction) between two snapshots (None when unknown)."""
    if a.ticks is None or b.ticks is None or b.ticks.total <= a.ticks.total:
        return None, None
    dt = b.ticks.total - a.ticks.total
    steal = (b.ticks.steal - a.ticks.steal) / dt
    busy = dt - (b.ticks.idle - a.ticks.idle) - (b.ticks.steal - a.ticks.steal)
    # ticks are CPU-seconds × CLK_TCK summed over all cores: the busy share of all cores' time
    busy_fraction = busy / dt
    own = (b.own_cpu_s - a.own_cpu_s) / max(1e-9, (b.wall_s - a.wall_s) * cores)
    return max(0.0, steal), max(0.0, busy_fraction - own)


def row_spread(median_s: float, low_s: float, high_s: float) -> float:
    return (high_s - low_s) / median_s if median_s > 0 else float("inf")


def assess(steal: float | None, other_cpu: float | None, loadavg: float | None, cores: int,
           spreads: Sequence[float], limits: Thresholds = Thresholds()) -> Contention:
    """Contention facts and the reasons (empty when reliable) that a profile should not be trusted."""
    reasons = []
    if steal is not None and steal > limits.steal_fraction:
        reasons.append(f"CPU steal {100 * steal:.1f} % of the time (limit {100 * limits.steal_fraction:.0f} %): "
                       "the hypervisor ran someone else on these cores")
    if other_cpu is not None and other_cpu > limits.other_cpu_fraction:
        reasons.append(f"other processes used {100 * other_cpu:.0f} % of the cores' time while measuring "
                       f"(limit {100 * limits.other_cpu_fraction:.0f} %)")
    if loadavg is not None and loadavg > limits.load_per_core * cores:
        reasons.append(f"load average {loadavg:.2f} above the {cores} cores")
    wide = None
    if spreads:
        wide = sum(1 for s in spreads if s > limits.row_spread) / len(spreads)
        if wide > limits.wide_rows_fraction:
            reasons.append(f"{100 * wide:.0f} % of the benchmark rows vary by more than "
                           f"{100 * limits.row_spread:.0f} % of their median (limit {100 * limits.wide_rows_fraction:.0f} % of rows)")
    return Contention(steal, other_cpu, loadavg, cores, wide, tuple(reasons))


def measurements_contention(m, limits: Thresholds = Thresholds()) -> Contention:
    """:func:`assess` of a :class:`~simtrain.calibrate.records.Measurements` from what it recorded:
    steal / other-CPU / load in its settings (``measure`` stores them), every row's spread (its 95 %
    interval when kept, else p90 − p10), and the machine-speed sentinels between groups (a reading
    past its workload's limit over the quickest one means the machine changed speed mid-run:
    the sentinels below)."""
    s = m.settings
    spreads = [row_spread(r.median_s, r.ci_low_s, r.ci_high_s) if r.ci_low_s is not None
               else row_spread(r.median_s, r.p10_s, r.p90_s) for r in m.rows]
    load = s.get("loadavg_1min_end")
    got = assess(s.get("steal_fraction"), s.get("other_cpu_fraction"),
                 load if load is not None and load >= 0 else None, m.machine.cpu_cores, spreads, limits)
    extra = [f"between groups the machine-speed sentinels ran slower than at their quickest ({phrase}): "
             "the machine's speed changed while measuring" for phrase in over_limit(m.rows, quickest(m.rows))]
    extra += _unmeasured_first_touch(m.rows)
    if extra:
        got = Contention(got.steal_fraction, got.other_cpu_fraction, got.loadavg_1min, got.cores,
                         got.wide_rows_fraction, got.reasons + tuple(extra))
    return got


def _unmeasured_first_touch(rows) -> list[str]:
    """A first-touch bench whose fresh buffers faulted too little at every size (the allocator handed
    back mapped pages) measured nothing: the profile would leave out the cost of fresh pages."""
    from simtrain.calibrate.bench_memory import first_touch_tensor_bytes, fit_first_touch
    fresh = [r for r in rows if r.bench == "first_touch" and r.params.get("fresh")]
    if not fresh or fit_first_touch(rows):
        return []
    faulted = sum(r.bytes_moved for r in fresh) / 2**20
    wanted = sum(first_touch_tensor_bytes(r) for r in fresh) / 2**20
    return [f"the first-touch bench's fresh buffers faulted {faulted:.0f} of {wanted:.0f} MiB: the cost of fresh "
            "pages was not measured and the profile would leave it out"]


def benchmark_key(row) -> tuple:
    """What identifies one benchmark across passes and measurement sets: bench, phase, dtype, calls and
    params (less the engine cost a backward row records, which is measured, not chosen)."""
    params = tuple(sorted((k, str(v)) for k, v in row.params.items() if k != "autograd_call_s"))
    return (row.bench, row.phase, str(row.dtype), row.calls, params)


def merged_measurements(passes: Sequence, **settings):
    """One :class:`~simtrain.calibrate.records.Measurements` from several single passes, as
    ``st.measure(passes=N)`` keeps its own: rows by :func:`merge_passes`, the first pass's machine,
    settings and refusals, ``passes`` = their number (plus ``settings``), wall time summed."""
    from simtrain.calibrate.records import Measurements
    first = passes[0]
    return Measurements(tuple(merge_passes([m.rows for m in passes])), first.machine,
                        {**first.settings, "passes": len(passes), **settings}, first.unsupported,
                        wall_s=sum(m.wall_s for m in passes))


def median_order_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics (Conover, Practical
    Nonparametric Statistics, 3rd ed., §3.2): the k-th smallest and k-th largest of n values, k the
    largest rank whose interval still covers the median with probability ≥ ``confidence``
    (coverage 1 − 2·P(Binomial(n, ½) < k)); k = 1 (the extremes) when no narrower one does, as for
    n ≤ 5 (the extremes of 5 cover it with probability 93.75 %). The extremes of more values cover it
    ever more surely and so grow wider with n: 10 passes' extremes flagged 61 % of a set's rows as
    spread by more than half, against 23–34 % for 5 passes of the same machine."""
    from scipy.stats import binom
    x = sorted(values)
    n = len(x)
    k = 1
    while k + 1 <= n // 2 and 1.0 - 2.0 * binom.cdf(k, n, 0.5) >= confidence:  # cdf(k) = P(X < k + 1)
        k += 1
    return x[k - 1], x[n - k]


TRIM_FRACTION = 0.2
"""Share of the passes :func:`pass_centre` leaves off each end (at least one pass from three on)."""


def pass_centre(values: Sequence[float]) -> float:
    """The centre of one benchmark's pass medians: their mean with :data:`TRIM_FRACTION` of them, and
    at least one, left off each end (the median for up to four passes; the middle 6 of 10).

    Why not the median: on this project's VM some benches are bimodal *between passes* (a depthwise
    backward conv took 0.36–0.44 ms in eight of twenty passes and 0.63–0.78 ms in eleven), and the
    median of ten passes lands in one mode or the other on a one-pass change in the vote: two 10-pass
    sets dealt from the same twenty passes had every depthwise backward row 1.35–1.54× apart, and
    MobileNet's prediction 6.1 %. The trimmed mean weighs each mode by how often it came up (what a step
    that meets both averages) and still drops a slow spell at either end. Same twenty passes: 4.3 %
    apart odd against even (6.1 % with the median), 5.7 % consecutive (7.4 %)."""
    x = sorted(values)
    n = len(x)
    cut = max(1, int(TRIM_FRACTION * n)) if n >= 3 else 0
    kept = x[cut:n - cut]
    return sum(kept) / len(kept)


def merge_passes(passes: Sequence[Sequence]) -> list:
    """One row per benchmark from several passes over the grid, taken minutes apart: the trimmed mean
    of the passes' medians (:func:`pass_centre`: a slow spell that lasts one pass is left off, not
    averaged in),
    p10 / p90 the extremes over the passes, and the interval the 95 % order-statistic interval of the
    pass medians (:func:`median_order_interval`: the spread over time, which a bootstrap within one
    pass cannot see), and each pass's median (``pass_medians_s``); ``bytes_moved`` the median over the
    passes too (the same in every pass for all benches but first touch, whose fresh side records the
    bytes it faulted in). Rows keep the first pass's order."""
    import statistics
    from dataclasses import replace
    groups: dict[tuple, list] = {}
    for rows in passes:
        for r in rows:
            groups.setdefault(benchmark_key(r), []).append(r)
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) == 1:
            out.append(first)
            continue
        medians = [r.median_s for r in same]
        low, high = median_order_interval(medians)
        # the centre lies within the pass medians, so within each pass's p10 .. p90 extremes
        out.append(replace(first, median_s=pass_centre(medians), p10_s=min(r.p10_s for r in same),
                           bytes_moved=statistics.median(r.bytes_moved for r in same),
                           p90_s=max(r.p90_s for r in same), repeats=sum(r.repeats for r in same),
                           ci_low_s=low, ci_high_s=high, pass_medians_s=tuple(medians)))
    return out
