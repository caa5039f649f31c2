"""The machine a measurement ran on: its facts, its first-principles CPU peak, and the Device spec a
calibration starts from.

Machine facts and the CPU peak
------------------------------

Facts about the machine a measurement ran on, and a first-principles CPU device spec built from them.

The CPU peak is derived, not looked up (no datasheet gives it for a cloud vCPU):

    peak_fp32 = cores × simd_lanes_fp32 × fma_pipes × 2 × clock_hz          (one FMA = 2 FLOPs)

with ``simd_lanes_fp32`` = 16 for AVX-512F, 8 for AVX2/FMA, 4 for SSE; ``fma_pipes`` = 2 FMA units per
core for AVX2/AVX-512 x86 cores (Intel Haswell and later, AMD Zen 2 and later: Agner Fog's
microarchitecture manual, "execution units"), else 1. Two pipes is an assumption (mark U): some
Xeon Silver/Bronze parts have a single 512-bit FMA unit; calibration re-anchors the peak anyway.

The base device
---------------

The Device spec a calibration starts from when the caller gives none.

* cpu: a spec built from the machine facts — fp32 peak by
  :func:`simtrain.calibrate.machine.derived_cpu_peak_flops_per_s` (mark D), a SIMD matrix unit with the
  same geometry and a register-block tile (:func:`_simd_unit`), one DDR tier whose capacity is /proc/meminfo's MemTotal and whose bandwidth is the
  best measured streaming copy (mark D: a measurement, not a datasheet). The library's ``host-cpu``
  is a generic 32-core AVX-512 socket ("the stand-in for this machine until st.calibrate fits a real
  one"): starting from it would give this machine its DIMM capacity and bf16 units, so it is used
  only when passed explicitly (``base="host-cpu"``);
* cuda: the one library device whose leading name token (``h100``, ``a100``...) appears in the GPU
  name, when exactly one of them also matches the memory size (or only one matches at all); else the
  caller must pass ``base=`` (a wrong datasheet would silently skew every fitted fraction).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
from pathlib import Path

from simtrain.calibrate.records import MachineFacts, Measurements
from simtrain.errors import SpecError
from simtrain.glossary import DeviceKind, DType, OpClass
from simtrain.specs.base import Sourced
from simtrain.specs.hardware import Device, MatrixUnit, MemoryTier

__all__ = ["read_cpuinfo", "machine_facts", "machine_slug", "simd_lanes_fp32", "fma_pipes",
           "derived_cpu_peak_flops_per_s", "default_base", "device_from_facts", "best_copy_bytes_per_s",
           "best_matmul_flops_per_s"]


# ──── Machine facts and the CPU peak ────────────────────────────────────────────────────────────────

def read_cpuinfo(path: str | Path = "/proc/cpuinfo") -> dict[str, str]:
    """First processor block of /proc/cpuinfo as a dict (empty off Linux)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    return info


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _gpu_facts(device: str) -> tuple[str | None, int, str | None]:
    import torch
    if device != "cuda" or not torch.cuda.is_available():
        return None, 0, None
    return torch.cuda.get_device_name(0), torch.cuda.device_count(), torch.version.cuda


def machine_facts(device: str, threads: int, cpuinfo: dict[str, str] | None = None) -> MachineFacts:
    """Collect CPU model, cores, flags, clock, torch version, GPU name and today's date (UTC)."""
    import torch
    info = read_cpuinfo() if cpuinfo is None else cpuinfo
    mhz = info.get("cpu MHz")
    gpu_name, gpu_count, cuda = _gpu_facts(device)
    host = hashlib.sha256(platform.node().encode()).hexdigest()[:8]
    return MachineFacts(
        cpu_model=info.get("model name", platform.processor() or "unknown"), cpu_cores=_cores(),
        cpu_flags=tuple(sorted(info.get("flags", "").split())), cpu_mhz=float(mhz) if mhz else None,
        torch_version=torch.__version__, threads=threads, device=device, gpu_name=gpu_name,
        gpu_count=gpu_count, cuda_version=cuda, hostname_hash=host,
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"))


def machine_slug(facts: MachineFacts) -> str:
    """Short file-name slug: CPU model words without vendor noise + core count ("amd-epyc-2c"),
    or the GPU name when the measurements are for cuda ("nvidia-h100-80gb-hbm3")."""
    if facts.device == "cuda" and facts.gpu_name:
        base = facts.gpu_name
    else:
        base = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$|\d+-core", " ", facts.cpu_model.lower())
    words = re.findall(r"[a-z0-9]+", base.lower())
    slug = "-".join(words[:4]) or "unknown"
    return slug if facts.device == "cuda" else f"{slug}-{facts.cpu_cores}c"


def simd_lanes_fp32(flags: tuple[str, ...] | set[str]) -> int:
    """fp32 lanes of the widest FMA-capable vector unit the flags advertise."""
    flags = set(flags)
    if "avx512f" in flags:
        return 16
    if "avx2" in flags or "fma" in flags or "avx" in flags:
        return 8
    return 4


def fma_pipes(flags: tuple[str, ...] | set[str]) -> int:
    """FMA units per core: 2 on AVX2/AVX-512 x86 cores (see module docstring; an assumption), else 1."""
    flags = set(flags)
    return 2 if ("fma" in flags and ("avx2" in flags or "avx512f" in flags)) else 1


def derived_cpu_peak_flops_per_s(facts: MachineFacts) -> float | None:
    """cores × lanes × FMA pipes × 2 × clock; None when the clock is unknown."""
    if not facts.cpu_mhz:
        return None
    return facts.cpu_cores * simd_lanes_fp32(facts.cpu_flags) * fma_pipes(facts.cpu_flags) * 2.0 * facts.cpu_mhz * 1e6


# ──── The base device ───────────────────────────────────────────────────────────────────────────────

def best_copy_bytes_per_s(m: Measurements) -> float | None:
    """Streaming bandwidth of the largest device-memory copy (the size least helped by caches)."""
    copies = m.select(bench="copy")
    if not copies:
        return None
    largest = max(copies, key=lambda r: r.bytes_moved)
    return largest.bytes_per_s


def best_matmul_flops_per_s(m: Measurements, dtype: DType = DType.FP32):
    """The forward matmul row with the highest achieved FLOP/s in ``dtype`` (None when there is none)."""
    rows = [r for r in m.select(op_class=OpClass.MATMUL, phase="fw") if r.dtype == dtype]
    return max(rows, key=lambda r: r.flops_per_s) if rows else None


def _mem_total_bytes(path: str = "/proc/meminfo") -> float | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    match = re.search(r"MemTotal:\s+(\d+)\s+kB", text)
    return float(match.group(1)) * 1024 if match else None


def device_from_facts(m: Measurements) -> Device:
    """A CPU Device from /proc facts and the measured streaming bandwidth (see module docstring)."""
    facts = m.machine
    tag = f"measurements {m.hash[:8]}"
    peak = derived = derived_cpu_peak_flops_per_s(facts)
    if peak is None:
        best = best_matmul_flops_per_s(m)
        if best is None:
            raise SpecError.one(None, "base", "no clock in /proc/cpuinfo and no GEMM rows: cannot derive a CPU peak")
        peak = best.flops_per_s
    bw = best_copy_bytes_per_s(m)
    if bw is None:
        raise SpecError.one(None, "base", "the measurements have no copy rows: cannot size main memory")
    cap = _mem_total_bytes()
    peak_src = "cores x fp32 SIMD lanes x FMA pipes x 2 x clock (/proc/cpuinfo flags and MHz)"
    unit = _simd_unit(facts) if derived else None
    return Device(
        name=machine_slug(facts), kind=DeviceKind.CPU, vendor=None, matrix_unit=unit,
        description=f"{facts.cpu_model}, {facts.cpu_cores} cores (spec derived from machine facts)",
        peak_flops_per_s={DType.FP32: Sourced[float](value=peak, source=peak_src, mark="D")},
        memory=[MemoryTier(
            name="ddr", level="ddr",
            capacity_bytes=Sourced[float](value=cap or 16 * 2**30, source="/proc/meminfo MemTotal" if cap
                                          else "unknown (placeholder 16 GiB)", mark="D" if cap else "U"),
            bandwidth_bytes_per_s=Sourced[float](value=bw, source=f"largest copy bandwidth, {tag}", mark="D"))],
    )


def _simd_unit(facts) -> MatrixUnit:
    """The CPU's SIMD FMA units as a matrix unit: cores × (lanes × pipes) FMA per clock, and the register
    block of a BLIS-style SGEMM micro-kernel as the tile: 6 rows × 2 vector registers of columns × 1
    (the Haswell / Zen sgemm kernel is 6 × 16; Van Zee & van de Geijn, "BLIS", ACM TOMS 41(3), 2015).
    A GEMM with n = 1 per group (a depthwise conv) then fills one of 2·lanes columns, as it does."""
    src = "/proc/cpuinfo (cores, flags, MHz)"
    lanes = simd_lanes_fp32(facts.cpu_flags)
    return MatrixUnit(kind="simd", units_count=Sourced[int](value=facts.cpu_cores, source=src, mark="D"),
                      fma_per_clock_per_unit={DType.FP32: lanes * fma_pipes(facts.cpu_flags)},
                      clock_hz=Sourced[float](value=facts.cpu_mhz * 1e6, source=src, mark="D"),
                      tile=(6, 2 * lanes, 1),
                      source="fp32 lanes x FMA pipes per core (machine.py); tile = BLIS sgemm register block (U)")


def _library_gpu(gpu_name: str) -> Device | None:
    from simtrain.specs.library import library_names, load_device
    name = gpu_name.lower()
    hits = [n for n in library_names("device") if n.split("-")[0] in name]
    sized = [n for n in hits if any(tok.endswith("gb") and tok[:-2] in name for tok in n.split("-"))]
    pick = sized if len(sized) == 1 else hits
    return load_device(pick[0]) if len(pick) == 1 else None


def default_base(m: Measurements) -> Device:
    """The base Device for ``m`` when the caller gives none (see module docstring)."""
    if m.machine.device == "cuda":
        dev = _library_gpu(m.machine.gpu_name or "")
        if dev is None:
            raise SpecError.one(None, "base", f"no unique library device matches GPU {m.machine.gpu_name!r}; "
                                "pass base= (a device name or Device)")
        return dev
    return device_from_facts(m)
