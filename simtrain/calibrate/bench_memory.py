"""CPU benches timed as pairs of the same work: fresh pages and the last-level cache, conv layout reorders,
dropout's random draws, and an op's extra cost inside a training step.

Memory: fresh pages and the last-level cache
--------------------------------------------

Memory-system microbenchmarks beyond streaming bandwidth: the cost of touching fresh pages, and the
size of the last-level cache the cost layer's cache tier uses.

First touch (CPU): glibc's malloc serves an allocation of at least its mmap threshold with a fresh
``mmap`` and returns it to the kernel on ``free``; the threshold adapts upward to the size of freed
mmapped chunks but never above ``DEFAULT_MMAP_THRESHOLD_MAX`` = 4 MiB · sizeof(long) = 32 MiB on
64-bit Linux (glibc ``malloc/malloc.c``, mallopt(3) "M_MMAP_THRESHOLD"). PyTorch's CPU allocator is
plain malloc (c10 ``alloc_cpu``: posix_memalign), so every tensor of ≥ 32 MiB allocated in a training
step — a large layer's weight gradient under ``zero_grad(set_to_none=True)``, a large activation — is
fresh pages: the first write to each 4 KiB page takes a page fault and the kernel zeroes the page
before the write lands. The bench times writing a tensor of ``numel`` fp32 elements freshly allocated
(``torch.empty(n).fill_``) against writing the same amount into a reused buffer; the difference is the
first-touch time of those bytes.

The fresh side maps its pages itself (a private anonymous ``mmap``, what glibc does for such a
request when its heap has no room, then ``munmap``), rather than asking the allocator: glibc serves
even a large request from its heap when a freed region there is big enough (malloc.c ``_int_malloc``
tries the bins and the top chunk before ``sysmalloc`` maps), and then nothing faults. That happened
in one of five back-to-back calibrations (0 faults for 48 and 96 MiB), the fit lost the mechanism,
and it explained the large elementwise rows' own first touch by a 3.5× lower
``cache_miss_bandwidth_fraction`` instead. Measured here: mmap-and-fill and ``torch.empty().fill_`` of
48 MiB take the same 20 ms and fault the same 12 288 pages when glibc does map.

Convolution layout reorders
---------------------------

What a convolution over NCHW activations pays to convert them to its kernel's layout and back.

PyTorch keeps activations in NCHW unless a model asks for ``channels_last``. oneDNN's CPU convolution
kernels run on blocked (nChw8c / nChw16c) or NHWC layouts, so ``mkldnn_convolution`` reorders an NCHW
input into the kernel's layout and the output back: memory passes outside the kernel that do not
overlap its compute. The same convolution over channels-last tensors needs no reorder. The bench
times the forward of each shape both ways on the same data; the difference over the activation bytes
(input + output) is the rate the estimator charges per byte of a conv phase's activations
(``Efficiency.conv_layout_bytes_per_s``; ``cost/compute.py`` ``conv_layout_seconds``), the median
over shapes; a pair with t_nchw ≤ t_nhwc is left out.

Dense convolutions only. For grouped ones the channels-last path is another kernel, not the same one
without reorders: on this project's EPYC machine a groups-8 3×3 ran slower channels-last, and a
depthwise 3×3 gave 38 GB/s against 11–15 GB/s for dense shapes. Grouped and depthwise convolutions
keep their own fitted curve (``curve_kind``), which is timed over NCHW and so holds their layout
handling. GPUs are not measured: cuDNN picks NCHW kernels or transposes inside its own timing.

Dropout's random draws
----------------------

The rate at which the framework draws dropout's random numbers (CPU).

PyTorch's CPU dropout (``aten::dropout`` → ``bernoulli_`` on a tensor shaped like the input, then a
multiply) draws one Bernoulli sample per element from the CPU generator, a Mersenne Twister
(Matsumoto & Nishimura 1998) that ATen steps one element at a time under a lock: it does not
vectorise or spread over threads, and at ≈ 8 ns per element it costs ~50× the multiply it feeds
(measured on this project's EPYC machine). A CUDA dropout kernel draws Philox numbers inside its
memory-bound pass, so the bench measures CPUs only.

The bench times ``buf.bernoulli_(0.9)`` (draw and write) and ``buf.fill_(0.9)`` (the same write)
into one preallocated fp32 buffer per size; the difference is the draws alone, so the rate
(``Efficiency.rng_draws_per_s``) is numel / (t_draw − t_fill), the median over sizes.

Cold calls inside a step
------------------------

What an op costs inside a training step over the benchmark loop's back-to-back calls (CPU).

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

import mmap
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from simtrain.calibrate.records import Row
from simtrain.calibrate.timing import _sample_cpu, timing_of
from simtrain.calibrate.work_counts import conv2d_counts, conv2d_out_hw, optimizer_counts
from simtrain.cost.compute import COLD_GAP_CAP_S, COLD_REFERENCE_GAP_S, cold_fraction
from simtrain.glossary import DType

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench, Grid

__all__ = ["MMAP_THRESHOLD_MAX_BYTES", "bench_first_touch", "fresh_fill", "fit_first_touch",
           "first_touch_tensor_bytes", "last_level_cache_bytes", "paired_rows", "median_pair_rate",
           "slower_pairs", "bench_conv_layout", "fit_conv_layout", "activation_bytes", "bench_rng", "fit_rng",
           "KEEP_PROBABILITY", "STEP_GAP_S", "DECAY_GAPS_S", "FIXED_OP", "OPTIMIZER_OPS", "bench_step_state",
           "fit_step_state", "fit_half_gap", "cold_pairs", "HALF_GAP_GRID_S", "evict_bytes",
           "EVICT_LLC_MULTIPLE", "EVICT_MIN_BYTES", "EVICT_MAX_BYTES"]


# ──── Memory: fresh pages and the last-level cache ──────────────────────────────────────────────────

MMAP_THRESHOLD_MAX_BYTES = 32 * 2**20
"""glibc's ceiling on the dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, malloc.c)."""


def paired_rows(b: Bench, bench: str, flag: str, sizes, with_cost, without) -> list[Row]:
    """CPU only: per fp32 element count, one row timing ``with_cost(n, buf)`` (``flag`` True) and one
    ``without(n, buf)`` (False) on the same preallocated buffer, their samples alternated
    (``Bench.row_pair``): the difference is the cost alone."""
    import torch
    if b.device != "cpu":
        return []
    rows: list[Row] = []
    for numel in sizes:
        buf = torch.empty(numel, device=b.device)
        rows += b.row_pair(bench, {"numel": numel}, flag, (0.0, 4.0 * numel),
                           lambda n=numel, t=buf: with_cost(n, t), lambda n=numel, t=buf: without(n, t))
    return rows


def slower_pairs(rows: Sequence[Row], bench: str, flag: str) -> list[tuple[Row, Row]]:
    """(``flag`` True, ``flag`` False) rows of ``bench`` that match on every other param, where the
    True side took longer (a pair where it did not measured no cost and is left out)."""
    by: dict[tuple, dict[bool, Row]] = {}
    for r in rows:
        if r.bench == bench:
            key = tuple(sorted((k, v) for k, v in r.params.items() if k != flag))
            by.setdefault(key, {})[bool(r.params[flag])] = r
    return [(p[True], p[False]) for p in by.values() if len(p) == 2 and p[True].median_s > p[False].median_s]


def median_pair_rate(rows: Sequence[Row], bench: str, flag: str, per_element: float) -> float | None:
    """The median over sizes of per_element · numel / (t_on − t_off) from :func:`paired_rows`' rows;
    None when no pair has t_on > t_off."""
    rates = [per_element * int(on.params["numel"]) / (on.median_s - off.median_s)
             for on, off in slower_pairs(rows, bench, flag)]
    return statistics.median(rates) if rates else None


def fresh_fill(numel: int) -> None:
    """Write ``numel`` fp32 elements into freshly mapped pages and unmap them: one first touch of
    ``4 · numel`` bytes, page faults, zeroing and teardown included. ``MAP_PRIVATE``: Python's default
    for an anonymous map is shared memory (tmpfs pages), measured 1.5× slower to fault and free."""
    import torch
    pages = mmap.mmap(-1, 4 * numel, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = torch.frombuffer(pages, dtype=torch.float32)
    view.fill_(1.0)
    del view  # releases the buffer export, which close() requires
    pages.close()


def bench_first_touch(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: :func:`fresh_fill` (fresh pages) and ``buf.fill_(1)`` (reused) per size, samples
    alternated. The fresh row's ``bytes_moved`` is the bytes it actually faulted in per call (minor
    page faults × page size, ``getrusage``), not the tensor's size, so a kernel that did not fault
    them (pre-populated or huge pages) shows as few faulted bytes and :func:`fit_first_touch` leaves
    the size out."""
    import resource

    import torch
    if b.device != "cpu":
        return []
    page = resource.getpagesize()
    rows: list[Row] = []
    for numel in grid.first_touch_numel:
        buf = torch.empty(numel, device=b.device)
        faults = [0, 0]  # minor faults, calls

        def fresh(n: int = numel, count: list = faults) -> None:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            fresh_fill(n)
            count[0] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            count[1] += 1

        on, off = b.row_pair("first_touch", {"numel": numel}, "fresh", (0.0, 4.0 * numel), fresh,
                             lambda t=buf: t.fill_(1.0))
        rows += [replace(on, bytes_moved=float(faults[0] * page / max(faults[1], 1))), off]
    return rows


FRESH_FAULTED_MIN_FRACTION = 0.5
"""A first-touch pair counts only if its fresh side faulted in at least this share of its tensor."""


def first_touch_tensor_bytes(row: Row) -> float:
    """Bytes of the tensor a first-touch row allocates per call (its ``numel`` elements of its dtype)."""
    from simtrain.glossary import DTYPE_BYTES
    return float(DTYPE_BYTES[row.dtype] * int(row.params["numel"]))


def fit_first_touch(rows: Sequence[Row]) -> dict[str, float]:
    """``first_touch_bytes_per_s``: the median over sizes of faulted bytes / (t_fresh − t_reused), and
    ``first_touch_min_bytes`` = the mmap threshold ceiling; a size whose fresh side faulted in less
    than :data:`FRESH_FAULTED_MIN_FRACTION` of its tensor, or did not cost more than the reused side,
    is left out; empty when no size remains."""
    rates = [on.bytes_moved / (on.median_s - off.median_s) for on, off in slower_pairs(rows, "first_touch", "fresh")
             if on.bytes_moved >= FRESH_FAULTED_MIN_FRACTION * first_touch_tensor_bytes(on)]
    if not rates:
        return {}
    return {"first_touch_bytes_per_s": statistics.median(rates), "first_touch_min_bytes": float(MMAP_THRESHOLD_MAX_BYTES)}


def last_level_cache_bytes(root: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> float:
    """Size of the largest data / unified cache that cpu0 sees (sysfs ``index*/size``, e.g. "32768K"),
    times the number of such caches for a per-core level (``shared_cpu_list`` naming one CPU is a
    private cache: L2 on most x86 parts); 0.0 where sysfs has no cache information."""
    best = 0.0
    for index in sorted(Path(root).glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _size_bytes((index / "size").read_text().strip())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        private = "," not in shared and "-" not in shared
        best = max(best, size * (os.cpu_count() or 1) if private else size)
    return best


def _size_bytes(text: str) -> float:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


# ──── Convolution layout reorders ───────────────────────────────────────────────────────────────────

BENCH = "conv_layout"


def activation_bytes(params, element_bytes: float = 4.0) -> float:
    """Bytes of a conv row's input (N·C·H·W) and output (N·K·P·Q), fp32 unless ``element_bytes``."""
    n, c, h, w, k = (int(params[x]) for x in ("n", "c", "h", "w", "k"))
    return element_bytes * (n * c * h * w + n * k * int(params["p"]) * int(params["q"]))


def bench_conv_layout(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: forward ``F.conv2d`` (fp32, no grad) of each dense ``grid.conv_layout`` shape over NCHW
    tensors (``nchw`` True) and the same values in channels-last (False), samples alternated."""
    import functools

    import torch
    import torch.nn.functional as F
    if b.device != "cpu":
        return []
    rows: list[Row] = []
    for n, c, h, w, k, r, s, stride, pad, groups in grid.conv_layout:
        p, q = conv2d_out_hw(h, w, r, s, stride, pad)
        params = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "stride": stride, "pad": pad,
                  "groups": groups, "p": p, "q": q}
        work = conv2d_counts(n, c, h, w, k, r, s, stride, pad, groups, 4)
        x, wt = b.randn(n, c, h, w), b.randn(k, c // groups, r, s)
        nhwc = torch.channels_last
        nchw_fn = functools.partial(F.conv2d, x, wt, None, stride, pad, 1, groups)
        nhwc_fn = functools.partial(F.conv2d, x.contiguous(memory_format=nhwc), wt.contiguous(memory_format=nhwc),
                                    None, stride, pad, 1, groups)
        with torch.no_grad():
            rows += b.row_pair(BENCH, params, "nchw", work, nchw_fn, nhwc_fn)
    return rows


def fit_conv_layout(rows: Sequence[Row]) -> dict[str, float]:
    """``conv_layout_bytes_per_s``: the median over dense shapes of activation bytes / (t_nchw − t_nhwc),
    pairs where NCHW is not slower left out; empty when no pair remains."""
    rates = [activation_bytes(on.params) / (on.median_s - off.median_s)
             for on, off in slower_pairs(rows, BENCH, "nchw") if int(on.params.get("groups", 1)) == 1]
    return {"conv_layout_bytes_per_s": statistics.median(rates)} if rates else {}


# ──── Dropout's random draws ────────────────────────────────────────────────────────────────────────

KEEP_PROBABILITY = 0.9
"""Bernoulli parameter of the bench (dropout p = 0.1); the draw's cost does not depend on it."""


def bench_rng(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: ``buf.bernoulli_(0.9)`` (draws) and ``buf.fill_(0.9)`` (same write) per size."""
    return paired_rows(b, "rng", "draw", grid.rng_numel, lambda _n, buf: buf.bernoulli_(KEEP_PROBABILITY),
                       lambda _n, buf: buf.fill_(KEEP_PROBABILITY))


def fit_rng(rows: Sequence[Row]) -> dict[str, float]:
    """``rng_draws_per_s``: the median over sizes of numel / (t_draw − t_fill); empty when no usable
    pair was measured."""
    rate = median_pair_rate(rows, "rng", "draw", 1.0)
    return {} if rate is None else {"rng_draws_per_s": rate}


# ──── Cold calls inside a step ──────────────────────────────────────────────────────────────────────

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
    step (≥ :data:`STEP_GAP_S`) first reads ``evict`` bytes of another buffer."""
    import torch
    x, m, img, w = torch.randn(4096), torch.randn(64, 64), torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)
    kernels = (lambda: torch.sigmoid(x), lambda: m @ m, lambda: torch.conv2d(img, w, padding=1))
    sweep = torch.ones(evict // 4) if evict > 0 else None

    def run(seconds: float) -> None:
        end, i = time.perf_counter() + seconds, 0
        if sweep is not None and seconds >= STEP_GAP_S:
            sweep.sum()
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
