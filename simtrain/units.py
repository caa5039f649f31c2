"""Units at the boundary: parse human unit strings into SI base units, once, at load time.

Inside simtrain every quantity is a plain float in SI base units and its unit lives in its name
(``capacity_bytes``, ``bandwidth_bytes_per_s``, ``peak_flops_per_s``, ``latency_s``). This module is
the only place that reads unit strings.

Rules (see ``shared/reference/hardware.md``, "How to read the marks"):

* decimal prefixes (k, M, G, T, P, E) are powers of 1000; binary prefixes (Ki, Mi, Gi, Ti, Pi) are
  powers of 1024 — "80 GiB" and "80 GB" are different numbers and never confused;
* ``B`` is a byte and ``b`` is a bit: "400 Gb/s" is 50e9 bytes/s;
* a bare number (or a numeric string with no unit) is already SI;
* an unknown, ambiguous or wrong-dimension unit is a :class:`UnitError` naming the text.
"""

from __future__ import annotations

import math
import re
from enum import Enum

__all__ = [
    "Dimension",
    "UnitError",
    "parse_quantity",
    "KIB",
    "MIB",
    "GIB",
    "TIB",
    "KB",
    "MB",
    "GB",
    "TB",
    "US",
    "MS",
]

KB, MB, GB, TB, PB = 1e3, 1e6, 1e9, 1e12, 1e15
KIB, MIB, GIB, TIB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
US, MS, NS = 1e-6, 1e-3, 1e-9


class UnitError(ValueError):
    """A unit string that cannot be read, or that measures the wrong kind of quantity."""


class Dimension(str, Enum):
    """The kinds of quantity a spec field can hold; each has an SI base unit."""

    BYTES = "bytes"
    BYTES_PER_S = "bytes_per_s"
    FLOPS = "flops"
    FLOPS_PER_S = "flops_per_s"
    SECONDS = "s"
    WATTS = "W"
    HERTZ = "Hz"
    DOLLARS_PER_HOUR = "dollars_per_h"
    OPS_PER_S = "ops_per_s"
    COUNT = "count"


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_PER_TIME = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "μs": 1e6, "ns": 1e9, "min": 1 / 60.0, "h": 1 / 3600.0}

_NUMBER = r"[-+]?(?:\d+(?:_\d+)*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>.*?)\s*$")


def _prefix_scale(prefix: str, *, allow_binary: bool) -> float:
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    if allow_binary and prefix in _BINARY:
        return _BINARY[prefix]
    raise UnitError(f"unknown prefix {prefix!r}")


def _split(unit: str, base_pattern: str) -> tuple[str, str] | None:
    """Split ``unit`` into (prefix, remainder) when it ends in ``base_pattern``."""
    m = re.fullmatch(rf"(?P<prefix>Ki|Mi|Gi|Ti|Pi|Ei|[kKMGTPE]?){base_pattern}", unit)
    return (m.group("prefix"), m.group(0)[len(m.group("prefix")):]) if m else None


def _bytes_or_bits(unit: str) -> float | None:
    """Scale of a data amount unit in bytes: B, kB, GiB, Gb (bits), Gbit."""
    for base, per_unit in (("B", 1.0), ("byte", 1.0), ("bytes", 1.0), ("b", 1 / 8), ("bit", 1 / 8), ("bits", 1 / 8)):
        parts = _split(unit, re.escape(base))
        if parts is not None:
            if parts[0] == "K" and per_unit == 1.0:
                # JEDEC "KB" means 1024 B, SI "kB" 1000 B: refuse to guess.
                raise UnitError(f"{unit!r} is ambiguous: write kB (1000 bytes) or KiB (1024 bytes)")
            return _prefix_scale(parts[0], allow_binary=True) * per_unit
    return None


def _rate(unit: str) -> tuple[str, float] | None:
    """Split a rate unit 'X/s' or 'Xps' into (X, per-second factor)."""
    if "/" in unit:
        num, den = (part.strip() for part in unit.rsplit("/", 1))  # "Gb / s" reads as "Gb/s"
        if den not in _PER_TIME:
            raise UnitError(f"unknown time unit {den!r} in rate {unit!r}")
        return num, _PER_TIME[den]
    m = re.fullmatch(r"(.+?)ps", unit)
    if m and m.group(1)[-1:] in ("B", "b"):  # GBps, Gbps
        return m.group(1), 1.0
    return None


def _parse_flops_amount(unit: str) -> float | None:
    parts = _split(unit, "FLOPs?")
    return None if parts is None else _prefix_scale(parts[0], allow_binary=False)


def _parse_ops_amount(unit: str) -> float | None:
    parts = _split(unit, "OPs?")
    return None if parts is None else _prefix_scale(parts[0], allow_binary=False)


def _scale_for(unit: str, dim: Dimension) -> float:
    """SI scale of ``unit`` for dimension ``dim``; raises UnitError when they do not match."""
    if dim is Dimension.BYTES:
        scale = _bytes_or_bits(unit)
    elif dim is Dimension.FLOPS:
        scale = _parse_flops_amount(unit)
    elif dim is Dimension.SECONDS:
        scale = _TIME.get(unit)
    elif dim is Dimension.WATTS:
        parts = _split(unit, "W")
        scale = None if parts is None else _prefix_scale(parts[0], allow_binary=False)
    elif dim is Dimension.HERTZ:
        parts = _split(unit, "Hz")
        scale = None if parts is None else _prefix_scale(parts[0], allow_binary=False)
    elif dim is Dimension.DOLLARS_PER_HOUR:
        scale = {"$/h": 1.0, "$/hr": 1.0, "USD/h": 1.0, "$/hour": 1.0}.get(unit.replace(" ", ""))
    elif dim is Dimension.COUNT:
        scale = None
    else:
        scale = _scale_for_rate(unit, dim)
    if scale is None:
        raise UnitError(f"unit {unit!r} is not a unit of {dim.value}")
    return scale


def _scale_for_rate(unit: str, dim: Dimension) -> float | None:
    if dim is Dimension.FLOPS_PER_S and re.fullmatch(r"[kKMGTPE]?FLOPS", unit):
        # "TFLOPS" (capital S) is the vendors' rate spelling; "TFLOPs" would be an amount.
        return _prefix_scale(unit[: -len("FLOPS")], allow_binary=False)
    if dim in (Dimension.OPS_PER_S, Dimension.FLOPS_PER_S) and re.fullmatch(r"[kKMGTPE]?OPS", unit):
        # integer peaks ("624 TOPS") are kept beside FLOP/s peaks: one op = one FLOP for rates
        return _prefix_scale(unit[: -len("OPS")], allow_binary=False)
    split = _rate(unit)
    if split is None:
        return None
    amount, per_s = split
    if dim is Dimension.BYTES_PER_S:
        scale = _bytes_or_bits(amount)
    elif dim is Dimension.FLOPS_PER_S:
        scale = _parse_flops_amount(amount)
    else:
        scale = _parse_ops_amount(amount)
    if scale is None and dim is Dimension.FLOPS_PER_S:
        scale = _parse_ops_amount(amount)
    return None if scale is None else scale * per_s


def parse_quantity(value: object, dim: Dimension) -> float:
    """Parse ``value`` ("80 GiB", "400 Gb/s", 1.5e-6, ...) as a quantity of ``dim`` in SI units.

    >>> parse_quantity("80 GiB", Dimension.BYTES)
    85899345920.0
    >>> parse_quantity("400 Gb/s", Dimension.BYTES_PER_S)
    50000000000.0
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a quantity of {dim.value}, got a boolean {value!r}")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            raise UnitError(f"{value!r} is too large") from None
    elif isinstance(value, str):
        number = _parse_text(value, dim)
    else:
        raise UnitError(f"expected a number or a unit string for {dim.value}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise UnitError(f"{value!r} is not a finite number")
    return number


def _parse_text(text: str, dim: Dimension) -> float:
    # thousands separators ("1,555 GB/s"); a comma not followed by exactly three digits is an error
    m = _QUANTITY.match(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text))
    if m is None:
        raise UnitError(f"cannot read {text!r} as a number with a unit of {dim.value}")
    number = float(m.group("num").replace("_", ""))
    unit = m.group("unit")
    if unit == "":
        return number
    try:
        scale = _scale_for(unit, dim)
    except UnitError as err:
        raise UnitError(f"{text!r}: {err}") from None
    return _apply(number, scale)


def _apply(number: float, scale: float) -> float:
    """``number × scale``, dividing by the integer inverse of sub-unit scales so that "5 us" is
    exactly 5e-06 (``5 * 1e-6`` is 4.9999999999999996e-06)."""
    if 0 < scale < 1:
        inverse = round(1 / scale)
        if abs(inverse * scale - 1) < 1e-12:
            return number / inverse
    return number * scale
