"""Human formatting of SI numbers (simtrain.report.format): the strings are written by hand."""

from __future__ import annotations

import pytest

from simtrain.report.format import (
    MISSING,
    format_bytes,
    format_count,
    format_dollars_per_hour,
    format_flops,
    format_flops_per_s,
    format_hertz,
    format_percent,
    format_quantity,
    format_rate,
    format_seconds,
    format_si,
    format_watts,
    render_table,
)

CASES = [
    (format_bytes, 80 * 2**30, "80.0 GiB"),
    (format_bytes, 42_405_855_232, "39.5 GiB"),      # A100 40 GB as deviceQuery reports it
    (format_bytes, 40 * 2**20, "40.0 MiB"),
    (format_bytes, 512, "512 B"),
    (format_bytes, (1024 - 0.01) * 2**20, "1.0 GiB"),  # rounding crosses the prefix
    (format_bytes, 2**40 * 2, "2.0 TiB"),
    (format_rate, 2.039e12, "2.04 TB/s"),
    (format_rate, 50e9, "50.0 GB/s"),
    (format_rate, 15.75e9, "15.8 GB/s"),
    (format_rate, 21e15, "21.0 PB/s"),
    (format_flops_per_s, 312e12, "312 TFLOP/s"),
    (format_flops_per_s, 989.4e12, "989 TFLOP/s"),
    (format_flops_per_s, 999.7e12, "1.00 PFLOP/s"),  # rounding crosses the prefix
    (format_flops_per_s, 1978.9e12, "1.98 PFLOP/s"),
    (format_flops, 3.14e23, "314 ZFLOP"),
    (format_seconds, 1.23e-3, "1.23 ms"),
    (format_seconds, 6e-7, "600 ns"),
    (format_seconds, 2.5, "2.50 s"),
    (format_seconds, 90, "1.50 min"),
    (format_seconds, 3 * 3600, "3.00 h"),
    (format_seconds, 30 * 86400, "30.0 d"),
    (format_seconds, 0, "0 s"),
    (format_watts, 700, "700 W"),
    (format_watts, 23e3, "23.0 kW"),
    (format_hertz, 1.41e9, "1.41 GHz"),
    (format_dollars_per_hour, 1.8, "$1.80/h"),
    (format_percent, 0.859, "85.9 %"),
    (format_count, 1_234_567, "1,234,567"),
    (format_rate, None, MISSING),
    (format_rate, float("nan"), "nan B/s"),
]


@pytest.mark.parametrize("fn, value, text", CASES, ids=[f"{c[0].__name__}-{c[2]}" for c in CASES])
def test_format(fn, value, text):
    assert fn(value) == text


def test_si_beyond_the_prefixes_uses_an_exponent():
    assert format_si(1e30, "B") == "1.00e+30 B"
    assert format_si(-2.5e-3, "s") == "-2.50 ms"


def test_format_quantity_reads_the_unit_from_the_name():
    assert format_quantity(80 * 2**30, "capacity_bytes") == "80.0 GiB"
    assert format_quantity(2.039e12, "bandwidth_bytes_per_s") == "2.04 TB/s"
    assert format_quantity(6e-7, "latency_s") == "600 ns"
    assert format_quantity(312e12, "peak_flops_per_s") == "312 TFLOP/s"
    assert format_quantity(700, "tdp_w") == "700 W"
    assert format_quantity(1.41e9, "clock_hz") == "1.41 GHz"
    assert format_quantity(1.8, "price_per_hour") == "$1.80/h"
    assert format_quantity(128, "cpu_cores") == "128"
    assert format_quantity(None, "latency_s") == MISSING


def test_render_table_pads_and_aligns():
    text = render_table(["NAME", "BW"], [["nvlink4", "25.0 GB/s"], ["ib-ndr", "50.0 GB/s"], ["x", None]], right=[1])
    assert text.splitlines() == [
        "NAME            BW",
        "-------  ---------",
        "nvlink4  25.0 GB/s",
        "ib-ndr   50.0 GB/s",
        "x                -",
    ]
