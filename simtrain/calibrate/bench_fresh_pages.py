"""Memory-system microbenchmarks beyond streaming bandwidth: the cost of touching fresh pages, and the
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
"""

from __future__ import annotations

import mmap
import os
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from simtrain.calibrate.records import Row

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench, Grid

__all__ = ["MMAP_THRESHOLD_MAX_BYTES", "paired_rows", "slower_pairs", "median_pair_rate", "fresh_fill",
           "bench_first_touch", "FRESH_FAULTED_MIN_FRACTION", "first_touch_tensor_bytes", "fit_first_touch",
           "last_level_cache_bytes"]


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
