"""Robust measurement with injected numbers (no real timing): bootstrap interval of a median, /proc/stat
steal and other-process CPU, load, spread, and ``simtrain calibrate`` refusing a noisy profile."""

from __future__ import annotations

import pytest

from simtrain.calibrate.bench_ops import timing_of
from simtrain.calibrate.records import MachineFacts, Measurements, Row
from simtrain.calibrate.robust import (
    Snapshot,
    Thresholds,
    assess,
    contention_between,
    measurements_contention,
    median_ci,
    parse_cpu_ticks,
)
from simtrain.glossary import DType, OpClass


def test_median_ci_is_deterministic_and_brackets_the_median():
    x = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98]
    med, lo, hi = median_ci(x)
    assert med == 1.0 and lo <= med <= hi and (lo, hi) == median_ci(x)[1:]
    assert lo >= min(x) and hi <= max(x)
    assert median_ci([2.0]) == (2.0, 2.0, 2.0)
    # a wider sample gives a wider interval
    _, lo2, hi2 = median_ci([0.5, 1.5, 0.7, 1.4, 1.0, 0.6, 1.3])
    assert hi2 - lo2 > hi - lo
    t = timing_of(x)
    assert (t.median_s, t.ci_low_s, t.ci_high_s, t.repeats) == (1.0, lo, hi, 7)


STAT0 = "cpu  1000 0 500 8000 100 0 0 0 0 0\ncpu0 500 0 250 4000 50 0 0 0 0 0\n"
# 1000 ticks later over 2 cores: user +600, system +100, idle +200, iowait +0, steal +100
STAT1 = "cpu  1600 0 600 8200 100 0 0 100 0 0\ncpu0 800 0 300 4100 50 0 0 50 0 0\n"


def test_proc_stat_steal_and_other_processes_by_hand():
    a, b = parse_cpu_ticks(STAT0), parse_cpu_ticks(STAT1)
    assert (a.total, a.idle, a.steal) == (9600, 8100, 0)
    # 10 s wall on 2 cores; this process used 4 CPU-s of the 20: 20 %
    s0, s1 = Snapshot(a, 1.0, 100.0, 0.5), Snapshot(b, 5.0, 110.0, 0.5)
    steal, other = contention_between(s0, s1, cores=2)
    assert steal == pytest.approx(100 / 1000)
    # busy = 1000 − 200 idle − 100 steal = 700 ticks = 70 % of the cores' time; less our 20 %
    assert other == pytest.approx(0.70 - 0.20)
    assert contention_between(Snapshot(None, 0, 0, None), s1, 2) == (None, None)


def test_assess_names_each_reason():
    quiet = assess(0.0, 0.05, 0.5, 2, [0.1] * 10)
    assert quiet.reliable and quiet.reasons == ()
    noisy = assess(0.10, 0.40, 3.0, 2, [0.1] * 7 + [0.9] * 3)
    assert not noisy.reliable and len(noisy.reasons) == 4
    text = " ".join(noisy.reasons)
    assert "steal 10.0 %" in text and "40 %" in text and "load average 3.00" in text and "30 % of the" in text
    assert assess(None, None, None, 2, []).reliable  # nothing known: nothing to refuse on
    assert assess(0.0, 0.0, 0.0, 2, [0.6], Thresholds(row_spread=0.7)).reliable


def _row(bench: str, median: float, lo: float, hi: float) -> Row:
    return Row(bench, OpClass.MATMUL, DType.FP32, {"m": 8}, 1e6, 1e3, median, lo, hi, 5, ci_low_s=lo, ci_high_s=hi)


def _measurements(settings: dict, rows: list[Row]) -> Measurements:
    facts = MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=("avx2", "fma"), cpu_mhz=2000.0,
                         torch_version="2.13.0", threads=2, device="cpu", gpu_name=None, gpu_count=0,
                         cuda_version=None, hostname_hash="00", date="2025-01-01")
    return Measurements(tuple(rows), facts, settings)


def test_measurements_contention_from_recorded_settings_rows_and_sentinels():
    rows = [_row("sentinel_gemm", 1e-3, 0.99e-3, 1.01e-3), _row("gemm", 2e-3, 1.9e-3, 2.1e-3),
            _row("sentinel_gemm", 1.1e-3, 1.0e-3, 1.2e-3)]
    quiet = measurements_contention(_measurements({"steal_fraction": 0.0, "other_cpu_fraction": 0.1,
                                                   "loadavg_1min_end": 0.5}, rows))
    assert quiet.reliable
    slowed = rows[:2] + [_row("sentinel_gemm", 3e-3, 2.9e-3, 3.1e-3)]
    got = measurements_contention(_measurements({"steal_fraction": 0.0}, slowed))
    assert not got.reliable and "256³ GEMM 3.0× slower" in got.reasons[0]
    # against the quickest reading, not the first: a run that opened in a slow spell is caught too
    opened_slow = [_row("sentinel_gemm", 3e-3, 2.9e-3, 3.1e-3)] + rows[1:]
    assert not measurements_contention(_measurements({"steal_fraction": 0.0}, opened_slow)).reliable


def test_a_memory_spell_the_gemm_sentinel_does_not_see_makes_the_set_unreliable():
    """Another tenant's memory traffic slows the 64 MiB read 4× and leaves the in-cache GEMM alone."""
    quiet = {"steal_fraction": 0.0, "other_cpu_fraction": 0.0, "loadavg_1min_end": 0.1}
    rows = [_row("sentinel_gemm", 1e-3, 1e-3, 1e-3), _row("sentinel_stream", 2e-3, 2e-3, 2e-3),
            _row("sentinel_gemm", 1e-3, 1e-3, 1e-3), _row("sentinel_stream", 5e-3, 5e-3, 5e-3)]
    assert measurements_contention(_measurements(quiet, rows[:3])).reliable
    assert measurements_contention(_measurements(quiet, rows[:3] + [_row("sentinel_stream", 5.8e-3, 5.8e-3,
                                                                        5.8e-3)])).reliable  # 2.9×: a quiet VM's spread
    got = measurements_contention(_measurements(quiet, rows + [_row("sentinel_stream", 8e-3, 8e-3, 8e-3)]))
    assert not got.reliable and "64 MiB read 4.0× slower" in got.reasons[0]


def test_a_first_touch_bench_that_did_not_fault_makes_the_set_unreliable():
    """The fresh side of each size must fault its tensor in: at 0 faulted bytes nothing was measured."""
    def ft(fresh: bool, numel: int, t: float, faulted: float) -> Row:
        return Row("first_touch", OpClass.MEMORY, DType.FP32, {"fresh": fresh, "numel": numel}, 0.0, faulted,
                   t, t, t, 5, ci_low_s=t, ci_high_s=t)
    quiet = {"steal_fraction": 0.0, "other_cpu_fraction": 0.0, "loadavg_1min_end": 0.1}
    faulted = [ft(True, 1 << 22, 5e-3, 16.0 * 2**20), ft(False, 1 << 22, 1e-3, 16.0 * 2**20)]
    assert measurements_contention(_measurements(quiet, faulted)).reliable
    reused = [ft(True, 1 << 22, 1.1e-3, 0.0), ft(False, 1 << 22, 1e-3, 16.0 * 2**20)]
    got = measurements_contention(_measurements(quiet, reused))
    assert not got.reliable and "faulted 0 of 16 MiB" in got.reasons[0]


def test_cli_refuses_a_noisy_profile_unless_allowed(tmp_path, capsys):
    from simtrain.cli import main
    from simtrain.cli.calibrate import NOISY_EXIT
    rows = [_row("sentinel_gemm", 1e-3, 0.99e-3, 1.01e-3), _row("gemm", 2e-3, 1.9e-3, 2.1e-3)]
    noisy = _measurements({"steal_fraction": 0.2, "other_cpu_fraction": 0.0, "loadavg_1min_end": 0.1}, rows)
    path = noisy.save(tmp_path / "m.json")
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--measurements", str(path), "--out", str(out)]) == NOISY_EXIT
    err = capsys.readouterr().err
    assert "unreliable" in err and "steal 20.0 %" in err and "--allow-noisy" in err
    assert not out.exists()


def test_order_interval_of_the_median_by_hand():
    """n = 5: only the extremes reach 95 % (they cover the median with 1 − 2/2⁵ = 93.75 %, the most
    any pair of order statistics can); n = 10: the 2nd and 9th (1 − 2·11/1024 = 97.9 %; the 3rd and 8th
    would cover 89 %); n = 20: the 6th and 15th (1 − 2·P(Bin(20, ½) ≤ 5) = 95.9 %)."""
    from simtrain.calibrate.robust import median_order_interval
    assert median_order_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)
    assert median_order_interval([float(i) for i in range(1, 11)]) == (2.0, 9.0)
    assert median_order_interval([float(i) for i in range(1, 21)]) == (6.0, 15.0)
    assert median_order_interval([7.0]) == (7.0, 7.0)
