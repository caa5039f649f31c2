"""``st.calibrate``: measurements → a calibrated Device; its residuals, its link fits and its profile on
disk.

The fit
-------

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

Residuals
---------

Residuals of a calibration: per row predicted vs measured, and MAPE per op class / backend.

``log_error = ln(predicted / measured)`` (what the fit minimises); ``rel_error = predicted / measured − 1``;
MAPE = mean |rel_error| × 100 over a group (the metric the validation suite reports).

Links: collectives and host↔device copies
-----------------------------------------

Fitting communication: collectives (gloo / NCCL) and host↔device copies, least squares on log time.

Two levels, both stored in ``Efficiency.extra`` (keys below; every value SI):

1. **The estimator's model** (what ``estimate`` will use): per backend, one link — per-rank
   per-direction bandwidth ``B`` and per-step latency ``α`` — plus the per-collective base latency
   ``collective_base_latency_s`` (the key :func:`simtrain.cost.collectives.collective_time` reads), fitted
   through ``collective_time`` itself on a one-dimension switch topology
   (:func:`simtrain.calibrate.predict.predict_collective`) over the all-reduce rows (every size and
   world size) when there are at least two — data parallelism's gradient sync is what the link is
   for, and gloo's other collectives do not share one α: at 1 KiB on 2 ranks broadcast takes ~0.2 ms,
   all-gather ~1 ms, all-reduce ~2.3 ms, which no single ring/tree latency reproduces — else over
   every collective. The residuals still list every collective row against this link. Keys:
   ``link.<backend>.bytes_per_s``, ``link.<backend>.latency_s``, and ``collective_base_latency_s``.
2. **Plain alpha-beta per collective** (Hockney's model, t = α + S/β_bw; Thakur et al. 2005 §2), for
   reading off one collective at one world size: ``collective.<backend>.<op>.w<n>.alpha_s`` and
   ``collective.<backend>.<op>.w<n>.algbw_bytes_per_s`` (S / bandwidth part: nccl-tests' algbw at
   large S). Host↔device copies the same way: ``<h2d|d2h>.<pinned|pageable>.alpha_s`` and
   ``.bytes_per_s``.

Profiles on disk
----------------

Calibration profiles on disk: a YAML file that *is* a device spec (``spec: device``), so a profile
loads with ``st.load_device(path)`` and can be named by path in a node spec (``device: profile.yaml``).

The calibration's identity travels inside the spec: ``efficiency.source`` reads
``calibrate key=<16 hex> measurements=<16 hex> base=<name>``, ``notes`` holds the full 64-hex key and
measurement hash, ``efficiency.extra`` the fitted link numbers and the MAPE per group
(``calibration.mape_pct.<group>``). A comment header repeats the residual summary for people.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from simtrain.calibrate.bench_memory import fit_rng
from simtrain.calibrate.collectives_bench import fit_rank_jitter
from simtrain.calibrate.fit_compute import ComputeFit, fit_compute
from simtrain.calibrate.machine import default_base, derived_cpu_peak_flops_per_s
from simtrain.calibrate.modes import PAIRED_FITS, memory_modes, paired_fit, paired_ranges, placement_mix
from simtrain.calibrate.predict import predict_collective, predict_row
from simtrain.calibrate.records import Measurements, Row, _frozen_map
from simtrain.cost.compute import MATRIX_CLASSES, device_efficiency
from simtrain.errors import SpecError
from simtrain.glossary import DeviceKind, DType, LinkKind, OpClass
from simtrain.specs.base import Sourced
from simtrain.specs.hardware import ComputeCurve, Device, Efficiency, Link

__all__ = ["Calibration", "calibrate", "fit", "profile_key", "spec_hash", "load_profile", "profile_link",
           "Residual", "residual", "mape_by_group", "group_of", "format_summary", "AlphaBeta", "LinkFit",
           "fit_alpha_beta", "fit_backend_link", "fit_collectives", "fit_host_device", "write_profile",
           "read_profile", "profile_key_of", "link_from_profile", "make_link"]


# ──── The fit ───────────────────────────────────────────────────────────────────────────────────────

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


# ──── Residuals ─────────────────────────────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class Residual:
    bench: str
    group: str
    """The op class (``matmul`` ...), ``optimizer``, or ``collective:<backend>`` / ``h2d`` / ``d2h``."""
    phase: str
    params: Mapping[str, Any]
    dtype: str
    predicted_s: float
    measured_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))

    @property
    def log_error(self) -> float:
        return math.log(self.predicted_s / self.measured_s)

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"bench": self.bench, "group": self.group, "phase": self.phase, "params": dict(self.params),
                "dtype": self.dtype, "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "log_error": self.log_error}


def group_of(row: Row) -> str:
    if row.phase == "optim":
        return "optimizer"
    if row.op_class is not None:
        return row.op_class.value
    if "backend" in row.params:
        return f"collective:{row.params['backend']}:{row.bench}"
    return row.bench


def residual(row: Row, predicted_s: float) -> Residual:
    return Residual(row.bench, group_of(row), row.phase, row.params, row.dtype.value, float(predicted_s),
                    row.median_s)


def mape_by_group(residuals: Sequence[Residual]) -> dict[str, float]:
    """MAPE (%) per group, plus ``all``."""
    groups: dict[str, list[float]] = {}
    for r in residuals:
        groups.setdefault(r.group, []).append(abs(r.rel_error))
        groups.setdefault("all", []).append(abs(r.rel_error))
    return {g: 100.0 * sum(v) / len(v) for g, v in sorted(groups.items())}


def format_summary(residuals: Sequence[Residual]) -> list[str]:
    """A table, one line per group: rows, MAPE, worst case (numbers formatted by ``report.format``)."""
    from simtrain.report.format import format_percent, render_table
    table = []
    for group, mape in mape_by_group(residuals).items():
        mine = [r for r in residuals if group in ("all", r.group)]
        worst = max(mine, key=lambda r: abs(r.rel_error))
        sign = "+" if worst.rel_error >= 0 else "-"
        table.append((group, len(mine), format_percent(mape / 100), sign + format_percent(abs(worst.rel_error)),
                      f"{worst.bench} {worst.phase} { {k: v for k, v in worst.params.items() if k != 'autograd_call_s'} }"))
    return render_table(("group", "rows", "MAPE", "worst", "worst case"), table, right=(1, 2, 3)).splitlines()


# ──── Links: collectives and host↔device copies ─────────────────────────────────────────────────────

@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float
    bytes_per_s: float
    rms_log_error: float


@dataclass(frozen=True)
class LinkFit:
    """The estimator-level fit of one backend: link bandwidth and latency, base latency, residuals."""

    backend: str
    bandwidth_bytes_per_s: float
    latency_s: float
    base_latency_s: float
    rows: tuple[Row, ...]
    predicted_s: tuple[float, ...]


def _log_fit(fun: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    return least_squares(fun, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                         x_scale="jac", max_nfev=400)


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> AlphaBeta:
    """t = α + S / B fitted on log t. Starts from the smallest time (α) and the largest S / t (B)."""
    s, t = np.asarray(sizes, float), np.asarray(times, float)

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.exp(x[0]) + s / np.exp(x[1])) - np.log(t)

    x0 = np.array([math.log(t.min() * 0.5), math.log(max((s / t).max(), 1.0))])
    res = _log_fit(resid, x0, np.array([math.log(1e-9), math.log(1e3)]), np.array([math.log(10.0), math.log(1e14)]))
    rms = float(np.sqrt(np.mean(resid(res.x) ** 2)))
    return AlphaBeta(float(math.exp(res.x[0])), float(math.exp(res.x[1])), rms)


def _with_collective(eff: Efficiency, base_latency_s: float) -> Efficiency:
    extra = dict(eff.extra, collective_base_latency_s=base_latency_s, collective_step_overhead_s=0.0)
    return eff.model_copy(update={"link_bandwidth_fraction": 1.0, "link_latency_scale": 1.0, "extra": extra})


def fit_backend_link(rows: Sequence[Row], eff: Efficiency) -> LinkFit:
    """Fit (B, α, base latency) of one backend through ``collective_time`` (see module docstring).
    With fewer than four rows the base latency is held at 0 and only B and α are fitted."""
    rows = tuple(rows)
    t = np.array([r.median_s for r in rows])
    with_base = len(rows) >= 4

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        return math.exp(x[0]), math.exp(x[1]), (math.exp(x[2]) if with_base else 0.0)

    def predict(x: np.ndarray) -> np.ndarray:
        bw, lat, base = unpack(x)
        e = _with_collective(eff, base)
        return np.array([predict_collective(r, bw, lat, e) for r in rows])

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(predict(x)) - np.log(t)

    big = max(rows, key=lambda r: r.bytes_moved)
    x0 = np.log([max(big.bytes_moved / big.median_s, 1e3), t.min() / 4, t.min() / 4])
    lo, hi = np.log([1e3, 1e-9, 1e-9]), np.log([1e14, 1.0, 1.0])
    k = 3 if with_base else 2
    res = _log_fit(resid, x0[:k], lo[:k], hi[:k])
    bw, lat, base = unpack(res.x)
    return LinkFit(rows[0].params.get("backend", "link"), bw, lat, base, rows, tuple(float(p) for p in predict(res.x)))


def _extend(lf: LinkFit, rows: Sequence[Row], eff: Efficiency) -> LinkFit:
    """``lf`` with the predictions for further rows appended (same link, no refit)."""
    e = _with_collective(eff, lf.base_latency_s)
    more = tuple(predict_collective(r, lf.bandwidth_bytes_per_s, lf.latency_s, e) for r in rows)
    return LinkFit(lf.backend, lf.bandwidth_bytes_per_s, lf.latency_s, lf.base_latency_s,
                   lf.rows + tuple(rows), lf.predicted_s + more)


def _groups(rows: Sequence[Row], key: Callable[[Row], tuple]) -> dict[tuple, list[Row]]:
    out: dict[tuple, list[Row]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def fit_collectives(rows: Sequence[Row], eff: Efficiency) -> tuple[dict[str, float], list[LinkFit]]:
    """Both levels for every backend present: (extra keys, estimator-level fits)."""
    extra: dict[str, float] = {}
    fits: list[LinkFit] = []
    per_op = _groups(rows, lambda r: (r.params["backend"], r.bench, int(r.params["world_size"])))
    for (backend, op, world), grp in sorted(per_op.items()):
        if len(grp) >= 2:
            ab = fit_alpha_beta([r.bytes_moved for r in grp], [r.median_s for r in grp])
            extra[f"collective.{backend}.{op}.w{world}.alpha_s"] = ab.alpha_s
            extra[f"collective.{backend}.{op}.w{world}.algbw_bytes_per_s"] = ab.bytes_per_s
    for (backend,), grp in sorted(_groups(rows, lambda r: (r.params["backend"],)).items()):
        if len(grp) >= 2:
            reduce = [r for r in grp if r.bench == "all_reduce"]
            lf = fit_backend_link(reduce if len(reduce) >= 2 else grp, eff)
            if len(reduce) >= 2:  # the other collectives' residuals against the same link
                lf = _extend(lf, [r for r in grp if r.bench != "all_reduce"], eff)
            fits.append(lf)
            extra[f"link.{backend}.bytes_per_s"] = lf.bandwidth_bytes_per_s
            extra[f"link.{backend}.latency_s"] = lf.latency_s
            extra[f"collective.{backend}.base_latency_s"] = lf.base_latency_s
    return extra, fits


def fit_host_device(rows: Sequence[Row]) -> dict[str, float]:
    """Alpha-beta of h2d / d2h copies, pinned and pageable (CUDA measurements only)."""
    extra: dict[str, float] = {}
    for (bench, pinned), grp in sorted(_groups(rows, lambda r: (r.bench, bool(r.params["pinned"]))).items()):
        if len(grp) >= 2:
            ab = fit_alpha_beta([r.bytes_moved for r in grp], [r.median_s for r in grp])
            tag = f"{bench}.{'pinned' if pinned else 'pageable'}"
            extra[f"{tag}.alpha_s"], extra[f"{tag}.bytes_per_s"] = ab.alpha_s, ab.bytes_per_s
    return extra


# ──── Profiles on disk ──────────────────────────────────────────────────────────────────────────────

_SOURCE = re.compile(r"^calibrate key=([0-9a-f]{16}) measurements=([0-9a-f]{16}) base=(\S+)$")


def write_profile(cal, path: str | Path) -> Path:
    """Write ``cal`` (a :class:`~simtrain.calibrate.fit.Calibration`) as a device spec YAML."""
    from simtrain.outputs import YAML_SUFFIXES, check_output_path
    path = check_output_path(path, "path", YAML_SUFFIXES)  # its folder made; a directory refused
    header = [f"# simtrain calibration profile {cal.key}", f"# measurements {cal.measurements_hash}",
              f"# base device {cal.base_name}; fit: {dict(cal.fit_info)}"]
    header += ["# residuals (predicted vs measured):"] + [f"#   {line}" for line in cal.summary()]
    body = {"spec": "device", **cal.device.model_dump(mode="json", exclude_none=True)}
    text = "\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110)
    path.write_text(text, encoding="utf-8")
    return path


def profile_key_of(device: Device) -> tuple[str, str, str]:
    """(key16, measurements16, base name) of a calibrated device; SpecError for any other device."""
    src = device.efficiency.source if device.efficiency is not None else ""
    match = _SOURCE.match(src)
    if match is None:
        raise SpecError.one(None, "efficiency.source", f"device {device.name!r} is not a calibration profile")
    return match.group(1), match.group(2), match.group(3)


def read_profile(path: str | Path) -> Device:
    """The calibrated Device stored at ``path`` (checked to be a calibration profile)."""
    from simtrain.specs.library import load_device
    device = load_device(Path(path))
    try:
        profile_key_of(device)
    except SpecError as err:
        raise SpecError.one(str(path), "efficiency.source", err.issues[0].reason) from None
    return device


def make_link(backend: str, bandwidth_bytes_per_s: float, latency_s: float, key16: str) -> Link:
    """The calibrated link of one collective backend: effective per-rank per-direction bandwidth and
    per-step latency, fitted through ``collective_time`` on a one-dimension switch (mark D)."""
    src = f"calibrate: {backend} collectives fit, profile {key16}"
    kind = LinkKind.LOOPBACK if backend == "gloo" else LinkKind.NVLINK
    return Link(name=f"{backend}-calibrated-{key16[:8]}", kind=kind,
                description=f"{backend} collectives fitted through collective_time on a switch topology",
                bandwidth_per_direction_bytes_per_s=Sourced[float](value=bandwidth_bytes_per_s, source=src, mark="D"),
                latency_s=Sourced[float](value=latency_s, source=src, mark="D"))


def link_from_profile(device: Device, backend: str = "gloo") -> Link:
    """The calibrated link of ``backend`` stored in a profile's ``efficiency.extra``."""
    key16, _, _ = profile_key_of(device)
    extra = device.efficiency.extra
    bw, lat = extra.get(f"link.{backend}.bytes_per_s"), extra.get(f"link.{backend}.latency_s")
    if bw is None or lat is None:
        raise SpecError.one(None, "efficiency.extra", f"profile {device.name!r} has no fitted {backend} link")
    return make_link(backend, bw, lat, key16)
