"""``st.calibrate``: measurements → a calibrated Device; its residuals, its link fits and its profile on
disk.

``st.calibrate``: fit a Device's efficiency parameters to measurements → a calibrated Device.

    m = st.measure("cpu", quick=True)
    dev = st.calibrate(m)                     # a Device: use it anywhere, e.g. st.Cluster.single(dev)
    cal = fit(m); cal.summary(); cal.save_profile("profile.yaml"); load_profile("profile.yaml")

What is fitted (:mod:`fit_compute`, the link fits below): per op class a ComputeCurve, the memory
bandwidth fraction and half-bytes, the launch overhead — through the estimator's own op-time function
(:mod:`predict`) — and the collectives' link bandwidth, per-step and base latency through the
estimator's own collective model. What is kept: the base spec's datasheet peaks and bandwidths —
except on a CPU, which has no datasheet: there the fp32 peak is this machine's first-principles peak
(cores × SIMD lanes × FMA pipes × 2 × clock, mark D), or the best measured GEMM or convolution rate
when that is higher (a VM's cpuinfo clock is its base clock) or the clock is unknown, and main-memory
bandwidth is the fastest measured streaming rate (:func:`_working_cpu`). On a CPU whose passes met the machine's two placement modes, every row is first
re-centred on the mix of modes the passes met, the same for every row (``modes.placement_mix``).
Timings identify only peak × peak_fraction; anchoring the peak at first
principles keeps the fitted fraction meaningful (≈ the MAMF ratio of hardware.md §1c). Re-deriving the
peak *after* the fit as "best GEMM rate / fitted peak_fraction" would move every matmul prediction
off the fitted optimum (the fitted ceiling sits below the best single row when backward rows are
slower), so it is not done. The calibrated device is named ``<base>-calibrated-<key8>``; ``key``
hashes the measurements and the base spec.

The residuals are in :mod:`simtrain.calibrate.fit_residuals`, the link fits (collectives and host↔device
copies) in :mod:`simtrain.calibrate.fit_links`, the profiles on disk in :mod:`simtrain.calibrate.profiles`;
their names are re-exported here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simtrain.calibrate.bench_memory import fit_rng
from simtrain.calibrate.bench_rank_jitter import fit_rank_jitter
from simtrain.calibrate.fit_compute import ComputeFit, fit_compute
from simtrain.calibrate.fit_links import (  # noqa: F401  (re-exported)
    AlphaBeta,
    LinkFit,
    fit_alpha_beta,
    fit_backend_link,
    fit_collectives,
    fit_host_device,
)
from simtrain.calibrate.fit_residuals import Residual, format_summary, group_of, mape_by_group, residual  # noqa: F401  (re-exported)
from simtrain.calibrate.machine import default_base, derived_cpu_peak_flops_per_s
from simtrain.calibrate.modes import PAIRED_FITS, memory_modes, paired_fit, paired_ranges, placement_mix
from simtrain.calibrate.predict import predict_row
from simtrain.calibrate.profiles import (  # noqa: F401  (re-exported)
    link_from_profile,
    make_link,
    profile_key_of,
    read_profile,
    write_profile,
)
from simtrain.calibrate.records import Measurements, Row
from simtrain.cost.compute import MATRIX_CLASSES, device_efficiency
from simtrain.errors import SpecError
from simtrain.glossary import DeviceKind, DType, OpClass
from simtrain.specs.base import Sourced
from simtrain.specs.hardware import ComputeCurve, Device, Efficiency, Link

__all__ = ["Calibration", "calibrate", "fit", "profile_key", "spec_hash", "load_profile", "profile_link",
           "Residual", "residual", "mape_by_group", "group_of", "format_summary", "AlphaBeta", "LinkFit",
           "fit_alpha_beta", "fit_backend_link", "fit_collectives", "fit_host_device", "write_profile",
           "read_profile", "profile_key_of", "link_from_profile", "make_link"]


# ──── The fit ─────────────────────────────────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class Calibration:
    """A fitted device with everything needed to judge it: residuals, links, hashes, fit status."""

    device: Device
    residuals: tuple[Residual, ...]
    links: Mapping[str, Link]
    key: str
    measurements_hash: str
    base_name: str
    fit_info: Mapping[str, Any]

    def mape_by_group(self) -> dict[str, float]:
        return mape_by_group(self.residuals)

    def summary(self) -> list[str]:
        return format_summary(self.residuals)

    def residuals_table(self):
        """One pandas row per measurement: bench, group, phase, params, predicted, measured, log error."""
        import pandas as pd
        return pd.DataFrame.from_records([r.to_dict() for r in self.residuals])

    def save_profile(self, path) -> Any:
        return write_profile(self, path)


def spec_hash(device: Device) -> str:
    return hashlib.sha256(device.model_dump_json().encode()).hexdigest()


def profile_key(m: Measurements, base: Device) -> str:
    """sha256 over the measurements' hash and the base spec's hash: the profile's identity."""
    return hashlib.sha256(f"{m.hash}:{spec_hash(base)}".encode()).hexdigest()


def _resolve_base(base: Device | str | None, m: Measurements) -> Device:
    if base is None:
        return default_base(m)
    if isinstance(base, str):
        from simtrain.specs.library import load_device
        return load_device(base)
    return base


def _start_efficiency(base: Device) -> Efficiency:
    """The base's efficiency (or its kind's default), with a neutral curve for any missing class."""
    try:
        eff = device_efficiency(base)
    except SpecError:
        eff = Efficiency(compute={}, source=f"neutral start (no efficiency default for {base.kind.value})")
    compute = {c: eff.compute.get(c, ComputeCurve(peak_fraction=0.5, half_flops=0.0)) for c in OpClass}
    return eff.model_copy(update={"compute": compute})


def _memory_start(eff: Efficiency, m: Measurements) -> Efficiency:
    """A CPU's memory-system parameters from this machine: the last-level cache size the measurement
    recorded (a cache tier; the fit starts its effective capacity there and its miss bandwidth at
    0.5, fit_compute._CACHE), first-touch cost of fresh pages, the dropout draw rate, the NCHW layout
    reorders of convolutions and an op's extra cost inside a step (calibrate/bench_memory.py), the
    ranks' per-step jitter (calibrate/collectives_bench.py), attention's
    ramp per flash tile (``Efficiency.flash_tiles``, with attention rows), the fixed cost outside the
    rows and depth ramps (``Efficiency.fixed_cost_unramped``); unchanged where the measurements have none
    of them."""
    paired = {pf.bench: paired_fit(m.rows, pf) for pf in PAIRED_FITS}  # each pass's pairs together
    update: dict[str, float | bool] = (dict(paired["first_touch"]) | fit_rng(m.rows) | paired["conv_layout"]
                                       | paired["step_state"] | fit_rank_jitter(m.rows))
    update["flash_tiles"] = any(r.bench == "sdpa" for r in m.rows)  # CPU attention's half_flops per tile
    update["fixed_cost_unramped"] = True  # the ramps scale the FLOPs' rate, not the fixed cost
    llc = float(m.settings.get("llc_bytes") or 0.0)
    if llc > 0:
        update.update(cache_bytes=llc, cache_miss_bandwidth_fraction=0.5)
    return eff.model_copy(update=update)


def _sourced(value: float, source: str, note: str | None = None) -> Sourced:
    return Sourced[float](value=float(value), source=source[:300], mark="D", note=note)


def _working_cpu(base: Device, rows: list[Row], m: Measurements, tag: str) -> Device:
    """The CPU spec the fit runs against. A CPU has no datasheet, so its numbers come from this machine:
    fp32 peak = the first-principles peak of :func:`derived_cpu_peak_flops_per_s` (or the best GEMM or
    convolution rate if that is higher or unknown: :func:`best_matrix_flops_per_s_rows`); dtypes not
    measured are dropped (``matrix_peak_flops_per_s`` then runs them at the fp32 rate, as a CPU without
    native 16-bit math does); the vector rate follows the fp32 peak; main-memory bandwidth = the fastest
    measured streaming op (mark D)."""
    best = best_matrix_flops_per_s_rows(rows)
    derived = derived_cpu_peak_flops_per_s(m.machine) if m.machine.device == "cpu" else None
    peak, src = derived or 0.0, "cores x fp32 SIMD lanes x FMA pipes x 2 x clock (/proc/cpuinfo)"
    if best is not None and best.flops_per_s > peak:
        peak, src = best.flops_per_s, f"best {best.bench} rate measured, {tag}"
    peaks = {DType.FP32: _sourced(peak, src)} if peak > 0 else dict(base.peak_flops_per_s)
    stream = max((r for r in rows if r.op_class not in MATRIX_CLASSES and r.phase != "optim"),
                 key=lambda r: r.bytes_per_s)
    main = base.main_tier
    note = f"fastest streaming op: {stream.bench} {dict(stream.params)} (cache-assisted rates count)"
    tier = main.model_copy(update={"bandwidth_bytes_per_s": _sourced(
        stream.bytes_per_s, f"calibrate: best streaming rate, {tag}", note)})
    memory = [tier if t.name == main.name else t for t in base.memory]
    return base.model_copy(update={"peak_flops_per_s": peaks, "memory": memory, "vector_flops_per_s": None})


_PEAK_CLASSES = frozenset({OpClass.MATMUL, OpClass.CONV})
"""Classes whose forward rows bound a CPU's fp32 peak from below: no kernel beats the hardware. The
clock in /proc/cpuinfo is the base clock on a VM (2.6 GHz on this project's EPYC), while the cores
boost: its dense 3×3 convolutions (oneDNN's AVX-512 kernels) ran at 461–481 GFLOP/s against a derived
332 and the best GEMM's 219–225, so a peak taken from the GEMMs alone held the conv curve at its ceiling
of 1 and its rows 21–25 % over (MAPE, runs 35–39); with the convs' rate as the peak, 12–14 %."""


def best_matrix_flops_per_s_rows(rows: list[Row]) -> Row | None:
    """The forward fp32 GEMM or convolution row with the highest achieved FLOP/s (None without one)."""
    mm = [r for r in rows if r.op_class in _PEAK_CLASSES and r.phase == "fw" and r.dtype is DType.FP32 and r.flops > 0]
    return max(mm, key=lambda r: r.flops_per_s) if mm else None


def _links(fits: list[LinkFit], key: str) -> dict[str, Link]:
    return {lf.backend: make_link(lf.backend, lf.bandwidth_bytes_per_s, lf.latency_s, key[:16]) for lf in fits}


def _final_efficiency(eff: Efficiency, extra: dict[str, float], key: str, m: Measurements, base: Device,
                      cpu_link: LinkFit | None) -> Efficiency:
    update: dict[str, Any] = {}
    if cpu_link is not None:  # the calibrated link carries effective numbers: no further derating
        update = {"link_bandwidth_fraction": 1.0, "link_latency_scale": 1.0}
        extra = dict(extra, collective_base_latency_s=cpu_link.base_latency_s, collective_step_overhead_s=0.0)
    data = eff.model_copy(update=update).model_dump()
    data.update(extra=dict(eff.extra, **extra),
                source=f"calibrate key={key[:16]} measurements={m.hash[:16]} base={base.name}")
    return Efficiency.model_validate(data)


def fit(measurements: Measurements, base: Device | str | None = None) -> Calibration:
    """Fit ``base`` (default: see :func:`default_base`) to ``measurements``; see the module docstring."""
    if not isinstance(measurements, Measurements):
        raise SpecError.one(None, "measurements", f"must be the Measurements st.measure returns, got "
                            f"{type(measurements).__name__}")
    base = _resolve_base(base, measurements)
    key = profile_key(measurements, base)
    # rows re-centred on the placement-mode mix the passes met (calibrate/modes.py); the key, the hash
    # and the profile's identity stay those of the measurements as given
    m, pm = placement_mix(measurements) if base.kind is DeviceKind.CPU else (measurements, None)
    tag = f"measurements {measurements.hash[:8]}"
    rows = [r for r in m.rows if r.op_class is not None]
    if not rows:
        raise SpecError.one(None, "measurements", "no compute rows to fit")
    is_cpu = base.kind is DeviceKind.CPU
    work = _working_cpu(base, rows, m, tag) if is_cpu else base
    start = _start_efficiency(base).model_copy(update={"launch_async": m.machine.device == "cuda"})
    cf: ComputeFit = fit_compute(rows, work, _memory_start(start, m) if is_cpu else start)
    eff = cf.efficiency
    coll_rows = [r for r in m.rows if r.op_class is None and "backend" in r.params]
    extra, link_fits = fit_collectives(coll_rows, eff)
    extra.update(fit_host_device([r for r in m.rows if r.bench in ("h2d", "d2h")]))
    cpu_link = next((lf for lf in link_fits if lf.backend == "gloo"), None) if is_cpu else None
    final_eff = _final_efficiency(eff, extra, key, measurements, base, cpu_link)
    res = [residual(r, predict_row(r, work, final_eff)) for r in rows]
    res += [residual(r, p) for lf in link_fits for r, p in zip(lf.rows, lf.predicted_s, strict=True)]
    mape = {f"calibration.mape_pct.{g}": v for g, v in mape_by_group(res).items()}
    final_eff = final_eff.model_copy(update={"extra": dict(final_eff.extra, **mape)})
    device = _final_device(work, base, final_eff, key, measurements)
    info = {"cost": cf.cost, "nfev": cf.nfev, "success": cf.success, "unidentified": list(cf.unidentified),
            "fitted": list(cf.names), "rows": len(res),
            "paired_ranges": {k: list(v) for k, v in paired_ranges(m.rows).items()} if is_cpu else {},
            "memory_modes": list(memory_modes(measurements.rows, final_eff.cache_bytes) or ()) if is_cpu else [],
            "placement_modes": pm.to_dict() if pm is not None else {}}
    return Calibration(device, tuple(res), _links(link_fits, key), key, measurements.hash, base.name, info)


def _final_device(work: Device, base: Device, eff: Efficiency, key: str, m: Measurements) -> Device:
    f = m.machine
    name = f"{base.name[:50]}-calibrated-{key[:8]}"
    desc = (f"{base.description or base.name} — calibrated on {f.gpu_name or f.cpu_model} ({f.cpu_cores} cores, "
            f"torch {f.torch_version}, {f.threads} threads, {f.date})")
    data = work.model_dump()
    data.update(name=name, description=desc, efficiency=eff.model_dump(),
                notes=f"calibration profile key {key}; measurements {m.hash}")
    return Device.model_validate(data)


def calibrate(measurements: Measurements, base: Device | str | None = None) -> Device:
    """The calibrated Device (see :func:`fit` for residuals and the profile)."""
    return fit(measurements, base).device


def load_profile(path) -> Device:
    return read_profile(path)


def profile_link(device: Device, backend: str = "gloo") -> Link:
    return link_from_profile(device, backend)
