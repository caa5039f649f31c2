"""What an op costs inside a training step over the benchmark loop's back-to-back calls (CPU).

Every other bench times an op called again and again on the same tensors, so its code, its page-table
entries and its data stay cached between calls. Inside a step each op instance runs once per phase:
the same instance last ran a whole step earlier, and other kernels on other data ran in between.
Measured on this project's 2-core EPYC VM (calls after a gap of other small torch ops, medians of 31):

| op | back-to-back | after 0.6 ms | after 2 ms | after 20 ms |
|---|---:|---:|---:|---:|
| 8×64 @ 64×64 matmul | 5.5 µs | 6.5 µs | 8–9 µs | 15–19 µs |
| relu, 64 KiB | 2.5–3.5 µs | 6–13 µs | 15–19 µs | 30–32 µs |
| relu, 4 MiB | 56–60 µs | 100–103 µs | 230–290 µs | 337–347 µs |

Two parts, and the bench measures both at a step-scale gap (:data:`STEP_GAP_S`):

* a fixed cost per call (``Efficiency.step_call_overhead_s``): the tiny matmul's extra time, whose
  18 KB of data cannot explain it (code, branch predictors and translations refetched);
* the rate at which a call streams data nobody touched since (``Efficiency.step_cold_bytes_per_s``):
  bytes / (t_cold − fixed) of the larger relu calls, which read and write memory last used a step
  ago. On a shared machine this is below a plain main-memory stream: the 4 MiB relu reads and
  writes 8 MiB at ~25 GB/s, where rotating copies stream at ~35 GB/s.

The cost layer charges both in a step (``cost.op_cost``): each launch pays the fixed cost, and every
byte an op moves except the tensor the op just before it wrote streams at the cold rate. The
benchmark rows themselves are predicted hot, as they are timed.

The fixed cost depends on the gap, and what goes cold is the kernel's code path at its shapes, not
its data: after 30 ms of the same 8×64 @ 64×64 matmul on other tensors the call was 1.5 µs slower
than hot, after 30 ms of other kernels 37 µs (and after 30 ms asleep 134 µs). So the bench also
times the fixed op after :data:`DECAY_GAPS_S` of filler (one full-grid run here: +0.6 / 2.6 / 6.1 /
11.1 / 12.6 µs after 0.2 / 1 / 5 / 20 / 60 ms) and :func:`fit_half_gap` fits the saturating
A · g / (g + h) to them (h = 5.6 ms there; ``Efficiency.step_call_half_gap_s``). The cost layer
charges each op at its own gap (``parallel.cold_calls``): the micro-batch time over the number of
ops of its signature, so a layer repeated 32 times in a 1 ms step launches nearly hot.

A third part is the optimizer's step (``Efficiency.step_optimizer_s``): ``optimizer.step()`` is a
few thousand lines of Python and dispatch around its kernels, all of it cold after a forward and a
backward. Timed on 11–62 tensors here, a fused SGD-with-momentum or AdamW step took 0.35–0.45 ms more
after 20 ms of other kernels than back to back, whatever the tensor count (11 tiny tensors: 0.06 →
0.46 ms), and ``opt.step()`` right after each zoo model's backward took 0.43–0.72 ms for the CNNs'
few small tensors. The bench times the two optimizers over 16 tensors of 1024 elements (too little
data to matter) and keeps the median of their cold − hot differences.

The gap's filler is a rotation of small kernels (a sigmoid over 16 KiB, a 64² matmul, an 8-channel
3×3 convolution): it changes what the core ran. A gap of a whole step (:data:`STEP_GAP_S` and
longer) first reads a buffer of twice the last-level cache (:func:`evict_bytes`), as the step's own
weights and activations stream through the caches between two runs of the same op. Without that
read the filler alone left the cold calls' data wherever the machine's neighbours let it stay: five
passes of one calibration here put the cold rate at 34–103 GB/s, five of the next at 79–150 GB/s
(above any main-memory stream of this VM: the data had stayed in L2 / L3), and the predicted
MobileNet step moved 10.3 → 8.4 ms while the measured one stayed at 11.7–12.0 ms
(validation/results/runs.md, runs 31 / 32). Five interleaved benches each way, the same
minutes: with the read, call overhead 7.7–8.9 µs, optimizer 222–274 µs; the filler alone 5.3–7.0
and 168–201 µs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from simtrain.calibrate.bench_fresh_pages import last_level_cache_bytes
from simtrain.calibrate.records import Row
from simtrain.calibrate.timing import _sample_cpu, timing_of
from simtrain.calibrate.work_counts import optimizer_counts
from simtrain.cost.compute import COLD_GAP_CAP_S, COLD_REFERENCE_GAP_S, cold_fraction
from simtrain.glossary import DType

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench, Grid

__all__ = ["STEP_GAP_S", "DECAY_GAPS_S", "FIXED_OP", "OPTIMIZER_OPS", "MIN_REPEATS", "EVICT_LLC_MULTIPLE",
           "EVICT_MIN_BYTES", "EVICT_MAX_BYTES", "evict_bytes", "bench_step_state", "cold_pairs",
           "HALF_GAP_GRID_S", "fit_half_gap", "fit_step_state"]


STEP_GAP_S = COLD_REFERENCE_GAP_S
"""Seconds of other work before each cold call: the order of a CPU training step (the validation
zoo's run 15–190 ms here)."""
DECAY_GAPS_S = (2e-4, 1e-3, 5e-3, COLD_GAP_CAP_S)
"""The other gaps after which the fixed op is also timed cold: with :data:`STEP_GAP_S` they give how
the cost grows with the gap (:func:`fit_half_gap`), from a layer repeated in a short step to an op
run once per long step."""
FIXED_OP = "mm8x64x64"
"""The call whose extra time is the fixed cost: too little data (18 KB) for the data to matter."""
OPTIMIZER_OPS = ("sgd_momentum_step", "adamw_step")
"""The optimizer steps timed cold and hot (fused, as the validation zoo trains), over
:data:`_OPTIMIZER_TENSORS` tensors of :data:`_OPTIMIZER_NUMEL` elements."""
_OPTIMIZER_TENSORS, _OPTIMIZER_NUMEL = 16, 1024
_BENCH = "step_state"
MIN_REPEATS = 5
"""Cold and warm calls per op at least, whatever the grid's plan: each cold sample costs a gap."""


EVICT_LLC_MULTIPLE = 2.0
"""Last-level caches' worth a step-long gap reads (:func:`evict_bytes`): a victim L3 keeps part of what
it held until a second capacity's worth went through."""
EVICT_MIN_BYTES, EVICT_MAX_BYTES = float(64 << 20), float(1 << 30)
"""Bounds on the buffer a step-long gap reads (:func:`evict_bytes`): 64 MiB where sysfs names no
cache, 1 GiB at most (it is read once per cold sample)."""


def evict_bytes(llc_bytes: float) -> int:
    """Bytes a step-long gap reads to push the cold call's data out of every cache:
    :data:`EVICT_LLC_MULTIPLE` times the last-level cache, within :data:`EVICT_MIN_BYTES` …
    :data:`EVICT_MAX_BYTES`."""
    return int(min(max(EVICT_LLC_MULTIPLE * llc_bytes, EVICT_MIN_BYTES), EVICT_MAX_BYTES))


def _filler(evict: int = 0):
    """Small kernels of other kinds on other small tensors, run in turn for the gap; a gap of a whole
    step (≥ :data:`STEP_GAP_S`) first reads ``evict`` bytes of another buffer, then runs the kernels
    for the whole gap (the read is not counted in it)."""
    import torch
    x, m, img, w = torch.randn(4096), torch.randn(64, 64), torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)
    kernels = (lambda: torch.sigmoid(x), lambda: m @ m, lambda: torch.conv2d(img, w, padding=1))
    sweep = torch.ones(evict // 4) if evict > 0 else None

    def run(seconds: float) -> None:
        if sweep is not None and seconds >= STEP_GAP_S:
            sweep.sum()
        # the gap's clock starts after the read: where the read outlasts the gap (a 480 MiB L3 read
        # twice, ~50 ms) the cold call came straight after one long stream and took ~140 µs more than
        # hot, against 15-25 µs after the same read and 5-20 ms of small kernels (2026-12-06, a 2-core
        # Xeon VM); inside a step the op before is another small kernel, never a 1 GB reduction
        end, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            kernels[i % len(kernels)]()
            i += 1
    return run


def _pair_samples(fn: Callable[[], object], repeats: int, gap_s: float, filler) -> tuple[list[float], list[float]]:
    """(cold, hot) single-call times, alternated: a cold call after ``gap_s`` of filler; a hot call
    right after a call of its own."""
    cold, hot = [], []
    for _ in range(2):
        fn()
    for _ in range(repeats):
        filler(gap_s)
        cold.append(_sample_cpu(fn, 1))
        fn()
        hot.append(_sample_cpu(fn, 1))
    return cold, hot


def bench_step_state(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: per op of ``grid.step_state_numel``, a cold row (``cold`` True) and a hot row (False)."""
    import torch
    if b.device != "cpu" or not grid.step_state_numel:
        return []
    evict = evict_bytes(last_level_cache_bytes())
    filler = _filler(evict)
    a, w = torch.randn(8, 64), torch.randn(64, 64)
    rows: list[Row] = []
    repeats = max(grid.plan.repeats, MIN_REPEATS)
    calls = [(FIXED_OP, 0, (lambda: a @ w), 4.0 * (a.numel() + w.numel() + a.shape[0] * w.shape[1]))]
    for numel in grid.step_state_numel:
        x = torch.randn(numel)
        calls.append((f"relu{numel}", numel, (lambda x=x: torch.relu(x)), 8.0 * numel))
    calls += _optimizer_calls()
    for name, numel, fn, moved in calls:
        rows += _pair_rows(b.device, name, numel, moved, STEP_GAP_S, _pair_samples(fn, repeats, STEP_GAP_S, filler),
                           evict)
    fixed_fn, fixed_moved = calls[0][2], calls[0][3]
    for gap in DECAY_GAPS_S:  # how the fixed cost grows with the gap (Efficiency.step_call_half_gap_s)
        rows += _pair_rows(b.device, FIXED_OP, 0, fixed_moved, gap, _pair_samples(fixed_fn, repeats, gap, filler),
                           evict if gap >= STEP_GAP_S else 0)
    return rows


def _pair_rows(device: str, name: str, numel: int, moved: float, gap_s: float,
               samples: tuple[list[float], list[float]], evicted: int) -> list[Row]:
    """The cold row (``cold`` True, after ``gap_s`` of filler that first read ``evicted`` bytes) and
    the hot row of one call."""
    rows = []
    for cold, times in zip((True, False), samples, strict=True):
        t = timing_of(times)
        rows.append(Row(bench=_BENCH, op_class=None, dtype=DType.FP32,
                        params={"op": name, "numel": numel, "cold": cold, "gap_s": gap_s, "evict_bytes": evicted},
                        flops=0.0, bytes_moved=moved, median_s=t.median_s, p10_s=t.p10_s, p90_s=t.p90_s,
                        repeats=t.repeats, device=device, ci_low_s=t.ci_low_s, ci_high_s=t.ci_high_s))
    return rows


def _optimizer_calls() -> list[tuple[str, int, Callable[[], object], float]]:
    """(name, elements, one step, bytes a step moves) of each optimizer in :data:`OPTIMIZER_OPS`:
    fused steps over small fp32 parameters with gradients set, their bytes as the estimator counts
    them (``counts.optimizer_counts``). Empty on a torch without CPU fused optimizers (before
    2.4): the profile then keeps the cold pass (``Efficiency.step_optimizer_s`` 0)."""
    import torch
    params = [torch.nn.Parameter(torch.randn(_OPTIMIZER_NUMEL)) for _ in range(_OPTIMIZER_TENSORS)]
    for prm in params:
        prm.grad = torch.randn(_OPTIMIZER_NUMEL)
    numel = _OPTIMIZER_TENSORS * _OPTIMIZER_NUMEL
    try:
        sgd = torch.optim.SGD(params, lr=1e-3, momentum=0.9, fused=True)
        adamw = torch.optim.AdamW(params, lr=1e-4, fused=True)
        sgd.step()
        adamw.step()
    except (RuntimeError, ValueError, TypeError):
        return []
    return [(name, numel, opt.step, optimizer_counts(kind, numel, _OPTIMIZER_TENSORS, "fused")[1])
            for name, kind, opt in zip(OPTIMIZER_OPS, ("momentum", "adamw"), (sgd, adamw), strict=True)]


def cold_pairs(rows: Sequence[Row]) -> dict[str, tuple[Row, Row]]:
    """(cold, hot) rows of the bench by op name, at the reference gap (:data:`STEP_GAP_S`)."""
    return {op: pair for (op, gap), pair in _pairs_by_gap(rows).items() if gap == STEP_GAP_S}


def _pairs_by_gap(rows: Sequence[Row]) -> dict[tuple[str, float], tuple[Row, Row]]:
    """(cold, hot) rows of the bench by (op name, gap); rows measured before the bench sampled several
    gaps carry the reference gap."""
    by: dict[tuple[str, float], dict[bool, Row]] = {}
    for r in rows:
        if r.bench == _BENCH:
            key = (str(r.params["op"]), float(r.params.get("gap_s", STEP_GAP_S)))
            by.setdefault(key, {})[bool(r.params["cold"])] = r
    return {k: (v[True], v[False]) for k, v in by.items() if len(v) == 2}


HALF_GAP_GRID_S = tuple(10 ** (-5 + 5 * i / 200) for i in range(201))
"""Candidate half gaps h for :func:`fit_half_gap` (10 µs … 1 s, log-spaced)."""


def fit_half_gap(rows: Sequence[Row]) -> dict[str, float]:
    """``step_call_half_gap_s``: the h whose saturating curve A · g / (g + h) best fits the fixed op's
    cold − hot times over its gaps (:data:`DECAY_GAPS_S` and the reference), least squares with A in
    closed form for each h of :data:`HALF_GAP_GRID_S`. Needs three gaps at least and a cost that
    grows (some difference > 0); else empty (the flat cost stays)."""
    points = [(gap, c.median_s - h.median_s) for (op, gap), (c, h) in _pairs_by_gap(rows).items()
              if op == FIXED_OP and gap > 0]
    if len(points) < 3 or max(d for _, d in points) <= 0:
        return {}

    def residual(half: float) -> float:
        phi = [cold_fraction(g, half) for g, _ in points]
        amp = sum(p * d for p, (_, d) in zip(phi, points, strict=True)) / sum(p * p for p in phi)
        return sum((d - amp * p) ** 2 for p, (_, d) in zip(phi, points, strict=True))
    return {"step_call_half_gap_s": min(HALF_GAP_GRID_S, key=residual)}


def fit_step_state(rows: Sequence[Row]) -> dict[str, float]:
    """``step_call_overhead_s``: the fixed op's cold − hot time (≥ 0); ``step_cold_bytes_per_s``: the
    median over the streaming ops of bytes / (cold time − fixed cost); ``step_optimizer_s``: the median
    over the optimizer steps of their cold − hot time (≥ 0; only where the rows have them). Empty
    without the bench's rows."""
    pairs = cold_pairs(rows)
    if FIXED_OP not in pairs:
        return {}
    cold, hot = pairs[FIXED_OP]
    fixed = max(cold.median_s - hot.median_s, 0.0)
    out = {"step_call_overhead_s": fixed}
    rates = [c.bytes_moved / (c.median_s - fixed) for name, (c, _h) in pairs.items()
             if name not in (FIXED_OP, *OPTIMIZER_OPS) and c.median_s > fixed]
    if rates:
        out["step_cold_bytes_per_s"] = statistics.median(rates)
    steps = [max(c.median_s - h.median_s, 0.0) for name, (c, h) in pairs.items() if name in OPTIMIZER_OPS]
    if steps:
        out["step_optimizer_s"] = statistics.median(steps)
    return out | fit_half_gap(rows)
