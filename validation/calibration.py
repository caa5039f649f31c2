"""The suite's calibration: microbenchmark measurements only (``st.measure``), fitted by ``st.calibrate``.

Two thread counts may be needed: the single-device steps run with the measurements' thread count;
the DDP ranks run one thread each, so they are predicted from a 1-thread calibration. A saved
measurements file is reused when given (``--measurements PATH``): PATH holds the step-time set and
``<PATH stem>.t1.json`` beside it the 1-thread set (measured and saved there when missing; when PATH
itself was measured with one thread it serves both).

Then one more calibration microbenchmark (:mod:`validation.overhead`): the per-op cost of the framework
inside a training step, measured on a synthetic chain of tiny layers, added to the fitted launch
overhead. ``step_device`` is the device the suite predicts with; ``device`` is ``st.calibrate``'s
alone (the report keeps both predictions).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from simtrain.calibrate.fit import Calibration, fit
from simtrain.calibrate.measure import measure
from simtrain.calibrate.records import Measurements
from validation.overhead import StepOverhead, fit_step_overhead, with_step_overhead

__all__ = ["Calibrated", "calibrated", "refined", "one_thread_path"]


@dataclass(frozen=True)
class Calibrated:
    measurements: Measurements
    calibration: Calibration
    path: Path | None
    loaded: bool
    seconds: float
    overhead: StepOverhead | None = None
    step_device: object = None
    """The calibrated device with the in-step per-op cost added (``device`` when not refined)."""
    sentinel: dict | None = None
    """:func:`validation.sentinel.speed_sample` right after the calibration (the drift reference)."""

    @property
    def device(self):
        return self.calibration.device

    @property
    def threads(self) -> int:
        return self.measurements.machine.threads

    def facts(self) -> dict:
        cal = self.calibration
        return {"device": cal.device.name, "key": cal.key, "measurements_hash": cal.measurements_hash,
                "threads": self.threads, "grid": self.measurements.settings.get("grid"),
                "rows": len(self.measurements.rows), "loaded": self.loaded,
                "path": str(self.path) if self.path else None, "seconds": self.seconds,
                "mape_pct": cal.mape_by_group(), "fit": dict(cal.fit_info),
                "step_device": getattr(self.step_device, "name", None),
                "step_overhead": self.overhead.to_dict() if self.overhead else None,
                "sentinel": self.sentinel, **self.passes_contention()}

    def passes_contention(self) -> dict:
        """CPU steal and other processes' share of the cores during each calibration pass, in order
        (one pass unless rounds merged several: ``rounds._merged``)."""
        s = self.measurements.settings
        return {"passes_steal_fraction": s.get("passes_steal_fraction", [s.get("steal_fraction")]),
                "passes_other_cpu_fraction": s.get("passes_other_cpu_fraction", [s.get("other_cpu_fraction")])}


def one_thread_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.t1.json")


def calibrated(device: str, grid: str, threads: int, path: Path | None,
               log: Callable[[str], None] = lambda _m: None, refine: bool = True,
               quiet_wait_s: float = 0.0, colocated: int = 1) -> Calibrated:
    """Load ``path`` if it exists, else measure (``grid``, ``threads``, ``colocated`` ranks sharing the
    host: ``st.measure``) and save to ``path``; then fit; then (``refine``) measure the in-step per-op
    cost at the measurements' thread count."""
    start = time.perf_counter()
    if path is not None and Path(path).exists():
        m, loaded = Measurements.load(path), True
        log(f"measurements loaded from {path} ({len(m.rows)} rows, {m.machine.threads} threads)")
    else:
        from validation.sentinel import wait_for_quiet
        waited = wait_for_quiet(quiet_wait_s) if quiet_wait_s > 0 else 0.0
        log(f"measuring {device} ({grid} grid, {threads} threads"
            + (f", {colocated} ranks on the host" if colocated > 1 else "")
            + f"; waited {waited:.0f} s for a quiet machine)")
        m, loaded = measure(device, grid=grid, threads=threads, out=path, log=lambda s: log(f"  {s}"),
                            colocated=colocated), False
    cal = fit(m)
    out = Calibrated(m, cal, Path(path) if path else None, loaded, time.perf_counter() - start, None, cal.device)
    return refined(out, log) if refine else out


def refined(c: Calibrated, log: Callable[[str], None] = lambda _m: None) -> Calibrated:
    """``c`` with the in-step per-op cost measured now (at the measurements' thread count) and the
    speed sentinel's reference taken now: call it right before the steps it will predict, so both
    see the process in the state those steps run in (thread pool, allocator)."""
    import torch

    from validation.sentinel import speed_sample
    m = c.measurements
    saved = torch.get_num_threads()
    torch.set_num_threads(m.machine.threads)
    try:
        overhead = fit_step_overhead(c.device, m.machine.device)
        sentinel = speed_sample(m.machine.device)
    finally:
        torch.set_num_threads(saved)
    log(f"in-step per-op cost ({m.machine.threads} threads): +{overhead.per_launch_s * 1e6:.2f} µs per launch "
        f"(fitted launch {c.device.efficiency.launch_overhead_s * 1e6:.2f} µs); per-step fixed "
        f"{overhead.per_step_s * 1e6:.0f} µs, charged {overhead.step_host_s * 1e6:.0f} µs")
    return replace(c, overhead=overhead, step_device=with_step_overhead(c.device, overhead), sentinel=sentinel)
