"""Unit strings at the boundary: every accepted spelling, by hand, and the rejections.

Expected values are written as the arithmetic that defines them (decimal prefixes are powers of
1000, binary prefixes powers of 1024, a bit is 1/8 byte), never as the parser's own output.
"""

from __future__ import annotations

import math

import pytest

from simtrain.units import GIB, Dimension, UnitError, parse_quantity

B, BPS, F, FPS, S, W, HZ, USD, OPS, N = (
    Dimension.BYTES, Dimension.BYTES_PER_S, Dimension.FLOPS, Dimension.FLOPS_PER_S, Dimension.SECONDS,
    Dimension.WATTS, Dimension.HERTZ, Dimension.DOLLARS_PER_HOUR, Dimension.OPS_PER_S, Dimension.COUNT,
)

ACCEPTED = [
    # bytes: decimal vs binary prefixes are different numbers
    ("80 GiB", B, 80 * 1024**3),
    ("80 GB", B, 80 * 1000**3),
    ("141 GB", B, 141e9),
    ("40 MiB", B, 40 * 1024**2),
    ("1 kB", B, 1000.0),
    ("1 KiB", B, 1024.0),
    ("2 TiB", B, 2 * 1024**4),
    ("1.2 PB", B, 1.2e15),
    ("42405855232", B, 42405855232.0),     # a bare number (string) is SI
    (42405855232, B, 42405855232.0),       # a bare number is SI
    ("8 bytes", B, 8.0),
    # bits vs bytes: b is a bit
    ("8 b", B, 1.0),
    ("1 Gb", B, 1e9 / 8),
    ("1 Kbit", B, 1000 / 8),
    # rates
    ("3.35 TB/s", BPS, 3.35e12),
    ("2,039 GB/s", BPS, 2039e9),           # thousands separator
    ("400 Gb/s", BPS, 400e9 / 8),          # a 400 Gb/s port moves 50 GB/s
    ("400 Gbps", BPS, 50e9),
    ("25 GBps", BPS, 25e9),
    ("1 GiB/ms", BPS, 1024**3 * 1000),
    ("1 Gb / s", BPS, 1e9 / 8),           # spaces around the slash
    ("3600 B/h", BPS, 1.0),
    ("60 B/min", BPS, 1.0),
    # FLOP/s vs FLOPs: a rate and an amount
    ("989.4 TFLOP/s", FPS, 989.4e12),
    ("312 TFLOPS", FPS, 312e12),           # vendors' capital-S spelling is a rate
    ("624 TOPS", FPS, 624e12),             # int8 peaks live beside FLOP/s peaks
    ("2 PFLOP/ms", FPS, 2e15 * 1e3),
    ("3.14 EFLOPs", F, 3.14e18),
    ("6 GFLOP", F, 6e9),
    ("918 TOPS", OPS, 918e12),
    ("1 TOP/s", OPS, 1e12),
    # time
    ("1.5 us", S, 1.5e-6),
    ("1.5 µs", S, 1.5e-6),
    ("600 ns", S, 600e-9),
    ("2 ms", S, 2e-3),
    ("3 min", S, 180.0),
    ("1 h", S, 3600.0),
    ("1.5e-6", S, 1.5e-6),
    # power, clock, price
    ("700 W", W, 700.0),
    ("23 kW", W, 23e3),
    ("1.98 GHz", HZ, 1.98e9),
    ("1410 MHz", HZ, 1.41e9),
    ("2.5 $/h", USD, 2.5),
    ("2.5 $/hour", USD, 2.5),
    # counts are bare numbers
    (1_000_000, N, 1e6),
    ("1_000", N, 1000.0),
]


@pytest.mark.parametrize("text, dim, expected", ACCEPTED, ids=[str(a[0]) for a in ACCEPTED])
def test_accepted_unit_strings(text, dim, expected):
    assert parse_quantity(text, dim) == pytest.approx(expected, rel=1e-12)


def test_table_is_large_enough():
    assert len(ACCEPTED) + len(REJECTED) >= 30


def test_sub_unit_scales_are_exact():
    # "5 us" must be exactly 5e-06, not 5 * 1e-6 = 4.9999999999999996e-06 (golden snapshots compare bits)
    assert parse_quantity("5 us", S) == 5e-06
    assert parse_quantity("0.6 us", S) == 6e-07
    assert parse_quantity("3 ns", S) == 3e-09


def test_gib_and_gb_differ_by_the_binary_factor():
    ratio = parse_quantity("80 GiB", B) / parse_quantity("80 GB", B)
    assert ratio == pytest.approx(1024**3 / 1000**3)
    assert parse_quantity("1 GiB", B) == GIB


REJECTED = [
    ("80 gb", B, "gb"),                    # lowercase g is not a prefix
    ("6144 KB", B, "ambiguous"),          # JEDEC KB vs SI kB
    ("80 GiB/s", B, "not a unit of bytes"),  # wrong dimension
    ("2039 GB/s", B, "not a unit of bytes"),
    ("80 GiB", BPS, "not a unit of bytes_per_s"),
    ("312 TB/s", FPS, "not a unit of flops_per_s"),
    ("3 TFLOPs", FPS, "not a unit of flops_per_s"),  # an amount, not a rate
    ("3 TFLOPS", F, "not a unit of flops"),         # a rate, not an amount
    ("1 PiFLOP/s", FPS, "unknown prefix"),          # FLOPs take decimal prefixes only
    ("1 MHz", S, "not a unit of s"),
    ("1 ms", HZ, "not a unit of Hz"),
    ("5 mW", W, "not a unit of W"),
    ("1 GB/fortnight", BPS, "unknown time unit"),
    ("80 furlongs", B, "not a unit of bytes"),
    ("80 G", B, "not a unit of bytes"),   # a prefix without its unit
    ("5 W", N, "not a unit of count"),
    ("", B, "cannot read"),
    ("   ", B, "cannot read"),
    ("GiB", B, "cannot read"),            # a unit without a number
    ("nan", B, "cannot read"),
    ("inf GB", B, "cannot read"),
    (float("nan"), B, "finite"),
    (float("inf"), S, "finite"),
    ("1e400 GB", B, "finite"),
    (10**400, B, "too large"),
    (True, B, "boolean"),
    (False, S, "boolean"),
    (None, B, "got NoneType"),
    ([1, 2], B, "got list"),
    ("1,5 GB", B, "not a unit of bytes"),  # a decimal comma is not a thousands separator
    ("1,5555 GB", B, "not a unit of bytes"),
]


@pytest.mark.parametrize("value, dim, message", REJECTED, ids=[repr(r[0])[:30] for r in REJECTED])
def test_rejected_unit_strings(value, dim, message):
    with pytest.raises(UnitError) as info:
        parse_quantity(value, dim)
    assert message in str(info.value)


def test_negative_numbers_parse_and_bounds_live_in_the_schema():
    # the parser reads the sign; Field(gt=0) in the schema rejects it (see test_bad_inputs)
    assert parse_quantity("-5 GB", B) == -5e9
    assert math.isfinite(parse_quantity("-0 s", S))
