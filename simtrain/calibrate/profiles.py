"""Calibration profiles on disk: a YAML file that *is* a device spec (``spec: device``), so a profile
loads with ``st.load_device(path)`` and can be named by path in a node spec (``device: profile.yaml``).

The calibration's identity travels inside the spec: ``efficiency.source`` reads
``calibrate key=<16 hex> measurements=<16 hex> base=<name>``, ``notes`` holds the full 64-hex key and
measurement hash, ``efficiency.extra`` the fitted link numbers and the MAPE per group
(``calibration.mape_pct.<group>``). A comment header repeats the residual summary for people.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from simtrain.errors import SpecError
from simtrain.glossary import LinkKind
from simtrain.specs.base import Sourced
from simtrain.specs.hardware import Device, Link

__all__ = ["write_profile", "profile_key_of", "read_profile", "make_link", "link_from_profile"]


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
