"""A machine-speed sentinel: the same two small workloads timed whenever the suite measures something,
so a report can show whether the machine ran at the same speed during calibration and validation.

On a shared or virtualised machine the host's other tenants change the speed of every CPU op by tens
of percent within minutes (seen on the 2-core CI VM: the same step 2× slower twenty minutes later,
with an idle guest). The sentinel is *not* used to correct anything; the report lists its ratio to the
calibration-time value next to each case so such drift is visible instead of being read as model error,
and the full run waits (up to a limit) for the machine to return to calibration speed before timing a
model (:func:`wait_for_speed`).

Workloads: a 256³ fp32 GEMM (compute-bound), a training step of a 16-block tiny chain
(:func:`validation.overhead.chain`, per-op-cost-bound) and a sum over 64 MiB (main-memory-bound:
another tenant's memory traffic slows it and not the other two, which stay in cache; runs 6–7 of
the suite calibrated in a spell the GEMM did not see); the index is their median times. Beside them
the calibration's own mode sentinel (:func:`dispatch_sample`: one 16 KiB exp call), whose reading
names the machine's placement mode a step was timed in (``simtrain.calibrate.modes``).
"""

from __future__ import annotations

import torch

from simtrain.calibrate.robust import STREAM_BYTES, dispatch_call  # the calibration's own sentinels

__all__ = ["speed_sample", "dispatch_sample", "drift", "wait_for_speed", "wait_for_quiet", "STREAM_BYTES"]

_DISPATCH_CALLS = 200
"""Calls per sample of :func:`dispatch_sample` (~1 ms: far above the clock's resolution)."""


def dispatch_sample(device: str = "cpu", repeats: int = 9) -> float:
    """Seconds per call of the calibration's mode sentinel (``sentinels.dispatch_call``): the median of
    ``repeats`` samples of :data:`_DISPATCH_CALLS` calls, after one warm-up sample."""
    import statistics
    import time
    call = dispatch_call(device)
    samples = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        for _ in range(_DISPATCH_CALLS):
            call()
        samples.append((time.perf_counter() - t0) / _DISPATCH_CALLS)
    return statistics.median(samples[1:])



def speed_sample(device: str = "cpu", repeats: int = 9) -> dict[str, float]:
    from validation.overhead import _loss, chain
    from validation.steps import time_steps
    a = torch.randn(256, 256, device=device)
    module, x = chain(16).to(device), torch.randn(2, 8, device=device)

    def step() -> None:
        module.zero_grad(set_to_none=True)
        _loss(module(x)).backward()
    gemm = time_steps(lambda: a @ a, device, 3, repeats).median_s
    stream = torch.ones(STREAM_BYTES // 4, device=device)  # larger than any last-level cache here
    read = time_steps(stream.sum, device, 1, max(3, repeats // 3)).median_s
    return {"gemm256_s": gemm, "chain16_step_s": time_steps(step, device, 3, repeats).median_s,
            "stream64mib_s": read, "dispatch_s": dispatch_sample(device, repeats)}


def drift(now: dict[str, float], ref: dict[str, float] | None) -> dict[str, float]:
    """now / ref per workload (1.0 = same speed as at calibration; 1.3 = 30 % slower now)."""
    if not ref:
        return {}
    return {k: now[k] / ref[k] for k in now if ref.get(k)}


def wait_for_speed(ref: dict[str, float] | None, device: str = "cpu", tolerance: float = 1.2,
                   max_wait_s: float = 0.0, poll_s: float = 10.0) -> dict[str, float]:
    """Sample the sentinel until its GEMM time is within ``tolerance`` × the calibration-time value
    (another tenant's load makes it slower) or ``max_wait_s`` has passed; the last drift, plus
    ``waited_s``. Measurements taken at a different machine speed than the calibration would compare
    the machine's load, not simtrain."""
    import time
    start = time.perf_counter()
    while True:
        now = drift(speed_sample(device), ref)
        waited = time.perf_counter() - start
        if not now or now.get("gemm256_s", 1.0) <= tolerance or waited >= max_wait_s:
            return dict(now, waited_s=waited)
        time.sleep(poll_s)


def wait_for_quiet(max_wait_s: float, load_below: float = 0.6, poll_s: float = 10.0) -> float:
    """Wait until the 1-minute load average is below ``load_below`` (nobody else running) or
    ``max_wait_s`` has passed, before measuring; the seconds waited."""
    import os
    import time
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait_s:
        try:
            if os.getloadavg()[0] < load_below:
                break
        except OSError:
            break
        time.sleep(poll_s)
    return time.perf_counter() - start
