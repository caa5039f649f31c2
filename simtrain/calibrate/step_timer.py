"""Timing the steps of your own training loop: ``st.time_steps`` → ``StepTimes`` → ``st.RunRecord``.

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x)).backward()
        opt.step()

    times = st.time_steps(step, device="cuda", warmup=5, steps=20)
    times.median_s, times.ci_low_s, times.ci_high_s, times.peak_memory_bytes
    rec = times.record(sim_model, cluster, cfg)       # a RunRecord for st.calibrate_runs

Method: ``warmup`` steps run untimed (allocator growth, autotuning, lazy initialisation, the first
step's optimizer-state allocation); then each of ``steps`` steps is timed alone with
``time.perf_counter``, after a device synchronisation on CUDA so the time is the step's queued
kernels, not their launch. The median is the step time (a step's spread is skewed by other processes'
bursts, and the median is what ``st.calibrate_runs`` fits); its 95 % bootstrap interval and the
10th / 90th percentiles come with it (:func:`simtrain.calibrate.bench_ops.timing_of`).

What else a step tells, where the device has a counter:

* CUDA: the peak reserved memory over the timed steps (``torch.cuda.max_memory_reserved`` after
  ``reset_peak_memory_stats``): the figure ``StepReport.memory.reserved_bytes`` predicts.
* CPU (POSIX): the fresh memory pages each step faults in (``getrusage`` minor faults × page size),
  median over the steps. glibc hands a tensor of 32 MiB or more fresh pages from ``mmap`` on every
  allocation, and returns the top of its heap to the kernel when more than twice its current mmap
  threshold is free there, so smaller tensors fault too in some steps and not in others; the cost
  model charges the first kind only (``Efficiency.first_touch_bytes_per_s``). A step that faults
  much more than that pays about ``bytes / first_touch_bytes_per_s`` that the model does not see
  (docs/own-device.md, "Allocator faults"). Where transparent huge pages back a region, one fault
  maps 2 MiB and the count is a lower bound.
* Linux: how busy the machine was while the steps ran — the CPU steal and the other processes' share
  of the cores (:func:`simtrain.calibrate.robust.contention_between`, as ``st.measure`` records for
  a calibration pass), so a step timing and a calibration can be compared under the same light.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from simtrain.calibrate.robust import contention_between, snapshot
from simtrain.calibrate.timing import synchronize, timing_of

__all__ = ["StepTimes", "time_steps", "DEVICES"]

DEVICES = ("cpu", "cuda")
"""Devices whose steps can be timed: a CUDA step is synchronised before and after."""


@dataclass(frozen=True)
class StepTimes:
    """The timed steps of one training loop."""

    median_s: float
    """Median seconds per step: the step time."""
    p10_s: float
    p90_s: float
    ci_low_s: float
    """95 % percentile-bootstrap interval of the median."""
    ci_high_s: float
    samples_s: tuple[float, ...]
    """Every timed step, in order."""
    warmup: int
    """Steps run before timing."""
    device: str
    peak_memory_bytes: float | None = None
    """CUDA: peak reserved bytes over the timed steps; None where the device has no counter."""
    fresh_bytes: tuple[float, ...] | None = None
    """CPU: bytes of fresh pages each timed step faulted in (minor faults × page size), in order; None
    where the platform has no counter or the device is not the CPU."""
    steal_fraction: float | None = None
    """Share of the machine's CPU time the hypervisor gave to other guests while the steps ran
    (``/proc/stat`` steal ticks over all ticks); None where Linux's counters are not readable."""
    other_cpu_fraction: float | None = None
    """Share of all cores' time other processes used while the steps ran (None where unknown)."""

    @property
    def steps(self) -> int:
        return len(self.samples_s)

    @property
    def fresh_bytes_per_step(self) -> float | None:
        """Median of :attr:`fresh_bytes` (None without the counter)."""
        return statistics.median(self.fresh_bytes) if self.fresh_bytes else None

    def record(self, model, cluster, config, name: str = ""):
        """A :class:`~simtrain.calibrate.run_record.RunRecord` of these steps (the median as the step time,
        the peak memory where measured) for ``st.calibrate_runs``."""
        from simtrain.calibrate.run_record import RunRecord
        return RunRecord(model=model, cluster=cluster, config=config, step_time_s=self.median_s,
                         peak_memory_bytes=self.peak_memory_bytes, name=name)

    def summary(self) -> str:
        lines = [f"{self.steps} steps after {self.warmup} warm-up on {self.device}: median "
                 f"{1e3 * self.median_s:.3f} ms (95 % CI {1e3 * self.ci_low_s:.3f}–{1e3 * self.ci_high_s:.3f}; "
                 f"p10 {1e3 * self.p10_s:.3f}, p90 {1e3 * self.p90_s:.3f})"]
        if self.peak_memory_bytes is not None:
            lines.append(f"peak reserved memory {self.peak_memory_bytes / 2**30:.3f} GiB")
        if self.fresh_bytes_per_step is not None:
            lines.append(f"fresh pages faulted per step {self.fresh_bytes_per_step / 2**20:.1f} MiB")
        if self.steal_fraction is not None:
            lines.append(f"while timed: CPU steal {100 * self.steal_fraction:.1f} %, other processes "
                         f"{100 * (self.other_cpu_fraction or 0.0):.1f} % of the cores")
        return "\n".join(lines)


def _fault_counter(device: str) -> tuple[Callable[[], int], int] | None:
    """(minor faults of this process so far, page size) on a POSIX CPU; None elsewhere."""
    if device != "cpu":
        return None
    try:
        import resource
    except ImportError:  # Windows
        return None
    return (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt), resource.getpagesize()


def _check(step, device: str, warmup: int, steps: int) -> None:
    from simtrain.errors import SpecError
    if not callable(step):
        raise SpecError.one("time_steps", "step", f"must be a callable running one training step (got "
                            f"{type(step).__name__})")
    if device not in DEVICES:
        raise SpecError.one("time_steps", "device", f"must be one of {', '.join(DEVICES)} (got {device!r})")
    for field, v, least in (("warmup", warmup, 0), ("steps", steps, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise SpecError.one("time_steps", field, f"must be an integer ≥ {least} (got {v!r})")


def time_steps(step: Callable[[], object], device: str = "cpu", warmup: int = 3, steps: int = 10) -> StepTimes:
    """Run ``step`` (one whole training step of your loop) ``warmup`` times untimed, then time
    ``steps`` single steps (module docstring). ``device``: where the step's tensors live, ``"cpu"``
    or ``"cuda"`` (synchronised around each step; its peak memory read)."""
    _check(step, device, warmup, steps)
    for _ in range(warmup):
        step()
    synchronize(device)
    cuda = device == "cuda"
    if cuda:
        import torch
        torch.cuda.reset_peak_memory_stats()
    faults = _fault_counter(device)
    samples, fresh = [], []
    before = snapshot()
    for _ in range(steps):
        f0 = faults[0]() if faults else 0
        start = time.perf_counter()
        step()
        synchronize(device)
        samples.append(time.perf_counter() - start)
        if faults:
            fresh.append((faults[0]() - f0) * faults[1])
    steal, other = contention_between(before, snapshot(), os.cpu_count() or 1)
    peak = None
    if cuda:
        import torch
        peak = float(torch.cuda.max_memory_reserved())
    t = timing_of(samples)
    return StepTimes(median_s=t.median_s, p10_s=t.p10_s, p90_s=t.p90_s, ci_low_s=float(t.ci_low_s),
                     ci_high_s=float(t.ci_high_s), samples_s=tuple(samples), warmup=warmup, device=device,
                     peak_memory_bytes=peak if peak and math.isfinite(peak) else None,
                     fresh_bytes=tuple(float(b) for b in fresh) if faults else None,
                     steal_fraction=steal, other_cpu_fraction=other)
