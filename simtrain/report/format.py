"""Human formatting of numbers: the only place simtrain turns SI floats into text.

Every function takes a value in SI base units (bytes, bytes/s, FLOP/s, seconds, ...) and returns a
short string with a unit: ``format_bytes(80 * 2**30) == "80.0 GiB"``, ``format_rate(2.039e12) ==
"2.04 TB/s"``, ``format_flops_per_s(312e12) == "312 TFLOP/s"``, ``format_seconds(1.23e-3) ==
"1.23 ms"``. Rates and FLOP/s use decimal prefixes with three significant digits; memory sizes use
binary prefixes (the way devices report them) with one decimal. ``None`` prints as ``MISSING``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "MISSING", "format_si", "format_bytes", "format_rate", "format_bytes_per_s", "format_flops",
    "format_flops_per_s", "format_ops_per_s", "format_seconds", "format_watts", "format_hertz",
    "format_dollars_per_hour", "format_percent", "format_count", "format_quantity", "render_table",
]

#: what an absent value prints as
MISSING = "-"

_DECIMAL_UP = ("", "k", "M", "G", "T", "P", "E", "Z")
_DECIMAL_DOWN = ("", "m", "u", "n", "p")
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _special(value: float | None) -> str | None:
    """Text for values that have no magnitude to scale (None, NaN, infinities), else None."""
    if value is None:
        return MISSING
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None


def _significant(mantissa: float, digits: int) -> str:
    """``mantissa`` (1 <= |m| < 1000) with ``digits`` significant digits, trailing zeros kept."""
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(mantissa)))))
    return f"{mantissa:.{decimals}f}"


def format_si(value: float | None, unit: str, digits: int = 3) -> str:
    """``value`` with a decimal SI prefix so that the mantissa is in [1, 1000): "2.04 TB/s".

    Rounding that reaches 1000 moves up one prefix ("999.7 G" → "1.00 T")."""
    special = _special(value)
    if special is not None:
        return special if value is None else f"{special} {unit}"
    if value == 0:
        return f"0 {unit}"
    sign, mag = ("-" if value < 0 else ""), abs(float(value))
    exp3 = int(math.floor(math.log10(mag) / 3))
    if not -(len(_DECIMAL_DOWN) - 1) <= exp3 <= len(_DECIMAL_UP) - 1:
        return f"{sign}{mag:.{digits - 1}e} {unit}"  # beyond the prefixes
    text = _significant(mag / 1000.0**exp3, digits)
    if float(text) >= 1000 and exp3 < len(_DECIMAL_UP) - 1:  # 999.7 rounds to 1000: one prefix up
        exp3 += 1
        text = _significant(float(text) / 1000.0, digits)
    prefix = _DECIMAL_UP[exp3] if exp3 >= 0 else _DECIMAL_DOWN[-exp3]
    return f"{sign}{text} {prefix}{unit}"


def format_bytes(value: float | None) -> str:
    """A memory size with binary prefixes and one decimal: "80.0 GiB", "40.0 MiB", "512 B"."""
    special = _special(value)
    if special is not None:
        return special if value is None else f"{special} B"
    sign, mag = ("-" if value < 0 else ""), abs(float(value))
    if mag < 1024:
        return f"{sign}{mag:.0f} B"
    exp = min(int(math.log(mag, 1024)), len(_BINARY) - 1)
    text = f"{mag / 1024.0**exp:.1f}"
    if float(text) >= 1024 and exp < len(_BINARY) - 1:  # 1023.97 MiB rounds to 1.0 GiB
        exp += 1
        text = f"{mag / 1024.0**exp:.1f}"
    return f"{sign}{text} {_BINARY[exp]}"


def format_rate(value: float | None) -> str:
    """Bytes per second, decimal prefixes: "2.04 TB/s", "50.0 GB/s"."""
    return format_si(value, "B/s")


format_bytes_per_s = format_rate


def format_flops(value: float | None) -> str:
    """An amount of floating-point work: "3.15 ZFLOP" (one FMA = 2 FLOP)."""
    return format_si(value, "FLOP")


def format_flops_per_s(value: float | None) -> str:
    """A floating-point rate: "312 TFLOP/s"."""
    return format_si(value, "FLOP/s")


def format_ops_per_s(value: float | None) -> str:
    """An integer-op rate (int8 peaks): "624 TOP/s"."""
    return format_si(value, "OP/s")


def format_seconds(value: float | None) -> str:
    """A duration: "600 ns", "1.23 ms", "4.20 s", "12.5 min", "3.00 h", "21.4 d"."""
    special = _special(value)
    if special is not None:
        return special if value is None else f"{special} s"
    sign, mag = ("-" if value < 0 else ""), abs(float(value))
    for scale, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if mag >= scale:
            amount = mag / scale
            text = _significant(amount, 3) if amount < 1000 else f"{amount:,.0f}"
            return f"{sign}{text} {unit}"
    return format_si(value, "s")


def format_watts(value: float | None) -> str:
    """Power: "700 W", "23.0 kW"."""
    return format_si(value, "W")


def format_hertz(value: float | None) -> str:
    """A clock: "1.41 GHz"."""
    return format_si(value, "Hz")


def format_dollars_per_hour(value: float | None) -> str:
    """A price: "$1.80/h"."""
    special = _special(value)
    if special is not None:
        return special
    return f"${value:,.2f}/h"


def format_percent(fraction: float | None, decimals: int = 1) -> str:
    """A fraction as a percentage: 0.859 → "85.9 %"."""
    special = _special(fraction)
    if special is not None:
        return special
    return f"{fraction * 100:.{decimals}f} %"


def format_count(value: float | None) -> str:
    """A count with thousands separators: "1,234,567"; non-integers keep 4 significant digits."""
    special = _special(value)
    if special is not None:
        return special
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


_BY_SUFFIX = (
    ("_bytes_per_s", format_rate), ("_flops_per_s", format_flops_per_s), ("_ops_per_s", format_ops_per_s),
    ("_flops", format_flops), ("_bytes", format_bytes), ("_per_hour", format_dollars_per_hour),
    ("_hz", format_hertz), ("_w", format_watts), ("_s", format_seconds), ("_fraction", format_percent),
)


def format_quantity(value: float | None, name: str) -> str:
    """Format ``value`` by the unit in its field ``name`` (``capacity_bytes`` → bytes, ``latency_s`` →
    seconds, ...), the project's naming convention; counts and unknown suffixes print as numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return MISSING if value is None else str(value)
    for suffix, formatter in _BY_SUFFIX:
        if name.endswith(suffix):
            return formatter(value)
    return format_count(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                 right: Sequence[int] = (), indent: int = 0) -> str:
    """A plain-text table: a header row, a rule, one line per row; columns padded to their widest
    cell. Columns whose index is in ``right`` are right-aligned (numbers)."""
    cells = [[str(h) for h in headers]] + [[MISSING if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    pad = " " * indent

    def line(row: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return (pad + "  ".join(parts)).rstrip()

    rule = pad + "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])
