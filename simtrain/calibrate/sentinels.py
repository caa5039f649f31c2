"""Machine-speed sentinels timed between benchmark groups, and which groups to measure again.

Other tenants slow a shared machine in two ways that do not show in each other, so there are two
workloads, each with its own limit:

* ``sentinel_gemm``: a 256³ fp32 GEMM, in cache. Another process taking a core slows it: on two cores
  an OpenMP team that loses a core waits whole scheduler slices, ~4–8 ms per op.
* ``sentinel_stream``: a sum over 64 MiB, twice this VM class's 32 MiB last-level cache. Another
  tenant's memory traffic slows it and leaves the in-cache GEMM alone: runs 6–8 of the validation
  suite calibrated in such spells, and their profiles came out faster than the steps they predicted.

A third reading limits nothing and names the machine's *mode* (:mod:`simtrain.calibrate.modes`):

* ``sentinel_dispatch``: one call of ``torch.exp`` on 16 KiB, single-threaded and in L1, so its time
  is the framework's per-call path (Python, dispatcher, allocator) run by one core. On this project's
  VM it reads 3.6–3.8 µs for minutes, then 6.1–6.3 µs for minutes, and back — with nothing else of
  ours running — while in the same minutes a 128×784 @ 784×1024 GEMM reads 1.05 against 1.48 ms, a
  64 MiB copy 3.1 against 2.0 ms (the other way round), and the 256³ GEMM the same. A pause does not
  help (a mode lasts minutes), so it is never measured again; it tags which mode each group ran in.

A group's speed is its closing sentinels' times against the quickest reading of each workload so
far (the opening reading may itself have been taken in a slow spell). A group past either limit is
measured again after a pause, up to a few times, keeping the attempt whose sentinels were quickest
(:func:`worst_slowdown`); the verdict on the whole measurement
(:func:`simtrain.calibrate.robust.measurements_contention`) uses the same limits.

The limits are wide on purpose. Measured on the 2-core VM with nothing else of ours running, 40
readings 0.8 s apart: the GEMM 0.19–0.32 ms (1.7×), the 64 MiB read 1.1–3.3 ms (2.9×), its medians
jumping by 1.5× between readings 0.3 s apart. The memory bandwidth this VM sees moves on a scale of
a second, so a limit tighter than the spread of a quiet machine would re-run every group forever.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simtrain.glossary import DType

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench
    from simtrain.calibrate.records import Row

__all__ = ["STREAM_BYTES", "DISPATCH_BENCH", "DISPATCH_NUMEL", "Sentinel", "SENTINELS", "take", "dispatch_call", "quickest", "slowdowns", "worst_slowdown", "over_limit"]


STREAM_BYTES = 64 * 2**20
"""Bytes the memory-bound sentinel reads."""
DISPATCH_BENCH = "sentinel_dispatch"
"""Row name of the mode sentinel (module docstring)."""
DISPATCH_NUMEL = 4096
"""Elements of the mode sentinel's exp: 16 KiB, below the size at which torch splits an op over threads."""


@dataclass(frozen=True)
class Sentinel:
    bench: str
    """Row name of the workload."""
    limit: float
    """Slowdown against the quickest reading past which a group counts as measured in a slow spell."""
    label: str
    """How a message names it."""


SENTINELS = (Sentinel("sentinel_gemm", 2.0, "the 256³ GEMM"), Sentinel("sentinel_stream", 3.0, "the 64 MiB read"),
             Sentinel(DISPATCH_BENCH, math.inf, "the 16 KiB exp call"))
"""The GEMM's limit is the one this module replaced (closing ÷ opening GEMM > 2). The stream's is
above the 2.9× a quiet machine spans in single readings, and well below what a memory-heavy
tenant does (the validation sentinel saw the 64 MiB read 7.3× slower in run 8's calibration). The
dispatch call's limit is infinite: it tags modes, it never sends a group back."""
_BY_BENCH = {s.bench: s for s in SENTINELS}


def take(bench: Bench, after: str) -> list[Row]:
    """One reading of each sentinel workload, as rows tagged ``after`` (the group it closes)."""
    import torch
    a = torch.ones(256, 256, device=bench.device)
    stream = torch.ones(STREAM_BYTES // 4, device=bench.device)
    with torch.no_grad():
        return [bench.row("sentinel_gemm", None, DType.FP32, {"m": 256, "n": 256, "k": 256, "after": after},
                          (2.0 * 256**3, 3.0 * 4 * 256**2), lambda: a @ a),
                bench.row("sentinel_stream", None, DType.FP32, {"bytes": STREAM_BYTES, "after": after},
                          (float(STREAM_BYTES // 4), float(STREAM_BYTES)), stream.sum),
                bench.row(DISPATCH_BENCH, None, DType.FP32, {"numel": DISPATCH_NUMEL, "after": after},
                          (float(DISPATCH_NUMEL), 8.0 * DISPATCH_NUMEL), dispatch_call(bench.device))]


def dispatch_call(device: str = "cpu"):
    """The mode sentinel's workload (module docstring): a callable running ``torch.exp`` once on
    :data:`DISPATCH_NUMEL` fp32 elements. The validation suite times the same call beside its steps."""
    import torch
    x = torch.ones(DISPATCH_NUMEL, device=device)
    return lambda: torch.exp(x)


def quickest(rows: Sequence[Row]) -> dict[str, float]:
    """The quickest median of each sentinel workload among ``rows``."""
    best: dict[str, float] = {}
    for r in rows:
        if r.bench.startswith("sentinel_") and r.median_s > 0:
            best[r.bench] = min(best.get(r.bench, r.median_s), r.median_s)
    return best


def slowdowns(readings: Sequence[Row], best: dict[str, float]) -> dict[str, float]:
    """Per workload, the slowest of ``readings`` over the quickest reading ``best``."""
    out: dict[str, float] = {}
    for r in readings:
        if r.bench in best:
            out[r.bench] = max(out.get(r.bench, 0.0), r.median_s / best[r.bench])
    return out


def worst_slowdown(readings: Sequence[Row], best: dict[str, float]) -> float:
    """The largest slowdown of ``readings`` relative to its workload's limit (> 1: past a limit)."""
    return max((v / _BY_BENCH[k].limit for k, v in slowdowns(readings, best).items() if k in _BY_BENCH),
               default=0.0)


def over_limit(readings: Sequence[Row], best: dict[str, float]) -> list[str]:
    """One phrase per workload past its limit, e.g. "the 64 MiB read 3.4× slower"; empty when none."""
    return [f"{_BY_BENCH[k].label} {v:.1f}× slower" for k, v in slowdowns(readings, best).items()
            if k in _BY_BENCH and v > _BY_BENCH[k].limit]
