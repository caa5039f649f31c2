"""Facts about the machine a measurement ran on, and a first-principles CPU device spec built from them.

The CPU peak is derived, not looked up (no datasheet gives it for a cloud vCPU):

    peak_fp32 = cores × simd_lanes_fp32 × fma_pipes × 2 × clock_hz          (one FMA = 2 FLOPs)

with ``simd_lanes_fp32`` = 16 for AVX-512F, 8 for AVX2/FMA, 4 for SSE; ``fma_pipes`` = 2 FMA units per
core for AVX2/AVX-512 x86 cores (Intel Haswell and later, AMD Zen 2 and later: Agner Fog's
microarchitecture manual, "execution units"), else 1. Two pipes is an assumption (mark U): some
Xeon Silver/Bronze parts have a single 512-bit FMA unit; calibration re-anchors the peak anyway.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
from pathlib import Path

from simtrain.calibrate.records import MachineFacts

__all__ = ["read_cpuinfo", "machine_facts", "machine_slug", "simd_lanes_fp32", "fma_pipes",
           "derived_cpu_peak_flops_per_s"]


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
