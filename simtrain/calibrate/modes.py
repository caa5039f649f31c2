"""Whether a calibration's passes met the machine's memory system in more than one mode (issue 12).

On this project's shared VM the copies past the last-level cache run in modes: a 256 MiB copy took
8.1–9.7 ms in five of twenty passes and 12.8–16.3 ms in the other fifteen, with the passes' order
deciding which mode a 10-pass set mostly met. The cache tier is fitted on those copies
(``fit_compute._cache_tier``), so a set that met mostly the fast mode prices every stream past the
cache for it: two such back-to-back sets put the wide MLP's update, the one step cost far past the
cache, 5.7 % apart, although each set's fit was sound. No fit can take that out; a calibration can
say it happened. :func:`memory_modes` reads it from the copies' pass medians, and ``simtrain
calibrate`` warns (the profile is kept).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from simtrain.calibrate.fit_compute import CACHE_BENCH
from simtrain.calibrate.records import Row

__all__ = ["memory_modes", "modes_line", "MODE_RATIO"]

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
