"""The memory system's modes between passes (calibrate/modes.py), by hand on tiny rows."""

from __future__ import annotations

from simtrain.calibrate.modes import memory_modes, modes_line
from simtrain.calibrate.records import Row
from simtrain.glossary import DType, OpClass


def _copy(nbytes: float, passes: tuple[float, ...]) -> Row:
    mid = sorted(passes)[len(passes) // 2]
    return Row("copy", OpClass.MEMORY, DType.FP32, {"numel": int(nbytes // 8)}, 0.0, nbytes, mid, min(passes),
               max(passes), 5, pass_medians_s=passes)


def test_two_modes_of_the_copies_past_the_cache_are_counted():
    """Five passes, the two copies past a 32 MB cache at 1, 1, 1, 1.8, 1.8 times their median pass (the
    one in cache at 1 throughout): 1.8× apart, 2 of 5 passes slow. Both copies must agree: the pass
    speed is their median ratio."""
    past = [_copy(64e6, (1.0, 1.0, 1.0, 1.8, 1.8)), _copy(512e6, (8.0, 8.0, 8.0, 14.4, 14.4))]
    inside = _copy(8e6, (0.1, 0.1, 0.1, 0.1, 0.1))
    spread, slow, n = memory_modes([*past, inside], 32e6)
    assert abs(spread - 1.8) < 1e-12 and (slow, n) == (2, 5)
    assert "2 of 5 passes slow" in modes_line((spread, slow, n))


def test_one_mode_a_single_pass_or_no_copy_past_the_cache_says_nothing():
    """Passes within 1.3× of each other are one mode (threshold 1.4); a single pass keeps no pass
    medians; a cache bigger than every copy leaves nothing to read."""
    assert memory_modes([_copy(64e6, (1.0, 1.1, 1.3, 1.0, 1.2))], 32e6) is None
    single = Row("copy", OpClass.MEMORY, DType.FP32, {"numel": 8}, 0.0, 64e6, 1.0, 1.0, 1.0, 5)
    assert memory_modes([single], 32e6) is None
    assert memory_modes([_copy(64e6, (1.0, 1.0, 1.0, 1.8, 1.8))], 1e9) is None


# --- placement modes: the dispatch sentinel's readings and a profile per mode ---------------------------------

def _reading(after: str, passes: tuple[float, ...]) -> Row:
    return Row("sentinel_dispatch", None, DType.FP32, {"numel": 4096, "after": after}, 4096.0, 32768.0,
               sorted(passes)[len(passes) // 2], min(passes), max(passes), 7, pass_medians_s=passes)


def _bench(name: str, passes: tuple[float, ...]) -> Row:
    return Row(name, OpClass.MATMUL, DType.FP32, {"m": 8}, 1e6, 1e3, sorted(passes)[len(passes) // 2],
               min(passes), max(passes), 7, pass_medians_s=passes)


F, S = 3.7e-6, 6.2e-6  # the two modes' dispatch readings (µs scale, as measured)


def test_split_modes_by_hand():
    """Readings 3.6, 3.7, 3.8, 6.1, 6.2 µs: the largest between-mode variance splits after 3.8; medians
    3.7 and 6.15 µs (1.66x), threshold their geometric middle sqrt(3.7 × 6.15) = 4.770 µs, 2 of 5 slow.
    One mode within 1.3x, or fewer than four readings, is no split."""
    from simtrain.calibrate.modes import split_modes
    got = split_modes([6.1e-6, 3.6e-6, 3.8e-6, 6.2e-6, 3.7e-6])
    assert abs(got.fast_s - 3.7e-6) < 1e-15 and abs(got.slow_s - 6.15e-6) < 1e-15
    assert abs(got.threshold_s - 4.7702e-6) < 1e-9 and (got.slow_readings, got.readings) == (2, 5)
    assert abs(got.slow_fraction - 0.4) < 1e-12 and got.is_slow(5e-6) and not got.is_slow(4.5e-6)
    assert split_modes([3.6e-6, 3.7e-6, 3.8e-6, 4.6e-6]) is None  # 4.6 / 3.7 = 1.24 < 1.3
    assert split_modes([3.6e-6, 6.2e-6, 6.1e-6]) is None


def _three_passes() -> list[Row]:
    """Pass layout of st.measure merged over three passes: opening reading, the gemm group's row and its
    closing reading, the copy group's row and its closing reading, then a collective (after every reading).
    Opening F F S, after gemm F S S, after copy F S S: gemm ran fast, (changed), slow; copy fast, slow, slow."""
    return [_reading("start", (F, F, S)), _bench("gemm", (1.0, 1.5, 2.0)), _reading("gemm", (F, S, S)),
            _bench("copy", (3.0, 2.0, 2.2)), _reading("copy", (F, S, S)), _bench("all_reduce", (5.0, 6.0, 7.0))]


def test_rows_are_grouped_by_the_reading_that_closes_them_and_each_pass_named_by_both_readings():
    from simtrain.calibrate.modes import group_modes, placement_modes, row_groups
    rows = _three_passes()
    assert row_groups(rows) == [None, "gemm", None, "copy", None, None]
    modes = placement_modes(rows)
    assert (modes.slow_readings, modes.readings) == (5, 9)
    assert group_modes(rows, modes) == {"gemm": (False, None, True), "copy": (False, True, True)}


def test_modal_measurements_recentre_each_row_on_its_passes_in_each_mode():
    """gemm: slow passes [2.0], fast [1.0] (the middle pass changed mode and is left out); copy: slow
    [2.0, 2.2] → 2.1 (two passes: their mean), fast [3.0]. Slow share 1 → 2.0 and 2.1; 0 → 1.0 and 3.0;
    0.25 → 0.25·2.0 + 0.75·1.0 = 1.25 and 0.25·2.1 + 0.75·3.0 = 2.775. The collective keeps its median."""
    from simtrain.calibrate.modes import modal_measurements, placement_modes
    from simtrain.calibrate.records import MachineFacts, Measurements
    facts = MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=(), cpu_mhz=2000.0, torch_version="2.13.0",
                         device="cpu", gpu_name=None, threads=2, date="2026-12-05")
    m = Measurements(tuple(_three_passes()), facts, {"passes": 3})
    modes = placement_modes(m.rows)
    for share, gemm, copy in ((1.0, 2.0, 2.1), (0.0, 1.0, 3.0), (0.25, 1.25, 2.775)):
        got = {r.bench: r.median_s for r in modal_measurements(m, modes, share).rows}
        assert abs(got["gemm"] - gemm) < 1e-12 and abs(got["copy"] - copy) < 1e-12 and got["all_reduce"] == 6.0
    assert modal_measurements(m, modes, 0.25).settings["placement_slow_share"] == 0.25
    # the paired fits read pass medians: one mode keeps its own (two or more), a mix none
    passes = {share: {r.bench: r.pass_medians_s for r in modal_measurements(m, modes, share).rows} for share in (1.0, 0.25)}
    assert passes[1.0]["copy"] == (2.0, 2.2) and passes[1.0]["gemm"] is None and passes[0.25]["copy"] is None
    assert passes[1.0]["all_reduce"] == (5.0, 6.0, 7.0)


def test_placement_mix_is_the_passes_own_mix_and_is_applied_once():
    """The three passes' nine readings hold five slow ones: gemm 5/9 · 2.0 + 4/9 · 1.0 = 1.5556, copy
    5/9 · 2.1 + 4/9 · 3.0 = 2.5. Fitting re-centred measurements again changes nothing; one mode: as given."""
    from simtrain.calibrate.modes import placement_mix
    from simtrain.calibrate.records import MachineFacts, Measurements
    facts = MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=(), cpu_mhz=2000.0, torch_version="2.13.0",
                         device="cpu", gpu_name=None, threads=2, date="2026-12-05")
    m = Measurements(tuple(_three_passes()), facts, {"passes": 3})
    mixed, modes = placement_mix(m)
    got = {r.bench: r.median_s for r in mixed.rows}
    assert abs(got["gemm"] - (1.0 + 5 / 9)) < 1e-12 and abs(got["copy"] - 2.5) < 1e-12
    assert (modes.slow_readings, modes.readings) == (5, 9)
    assert placement_mix(mixed)[0] is mixed
    one = Measurements(tuple(r for r in m.rows if r.bench != "sentinel_dispatch"), facts, {"passes": 3})
    assert placement_mix(one) == (one, None)


def test_a_mix_lies_between_the_two_modes_profiles_for_every_row():
    """Property: for any pass times and any share, a row's re-centred time lies between its slow-mode and
    fast-mode times, and moves monotonically with the share."""
    from hypothesis import given, settings
    from hypothesis import strategies as st_

    from simtrain.calibrate.modes import modal_measurements, placement_modes
    from simtrain.calibrate.records import MachineFacts, Measurements
    facts = MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=(), cpu_mhz=2000.0, torch_version="2.13.0",
                         device="cpu", gpu_name=None, threads=2, date="2026-12-05")
    times = st_.tuples(*[st_.floats(1e-4, 1.0)] * 3)

    @settings(max_examples=60, deadline=None)
    @given(gemm=times, copy=times, a=st_.floats(0.0, 1.0), b=st_.floats(0.0, 1.0))
    def check(gemm, copy, a, b):
        rows = _three_passes()
        rows[1], rows[3] = _bench("gemm", gemm), _bench("copy", copy)
        m = Measurements(tuple(rows), facts, {"passes": 3})
        modes = placement_modes(m.rows)
        at = {s: {r.bench: r.median_s for r in modal_measurements(m, modes, s).rows} for s in (0.0, 1.0, min(a, b), max(a, b))}
        for bench in ("gemm", "copy"):
            lo, hi = sorted((at[0.0][bench], at[1.0][bench]))
            assert lo - 1e-12 <= at[min(a, b)][bench] <= hi + 1e-12
            rising = at[1.0][bench] >= at[0.0][bench]
            assert (at[max(a, b)][bench] - at[min(a, b)][bench]) * (1 if rising else -1) >= -1e-12

    check()


def test_placement_modes_round_trip_through_the_fit_record():
    """``fit_info`` keeps ``to_dict``; the CLI reads it back with ``from_dict``."""
    from simtrain.calibrate.modes import PlacementModes
    m = PlacementModes(3.7e-6, 6.2e-6, 4.79e-6, 2, 5)
    assert PlacementModes.from_dict(m.to_dict()) == m and m.to_dict()["slow_fraction"] == 0.4


def test_a_row_at_a_new_median_widens_its_spread_only_where_it_must():
    r = Row("gemm", OpClass.MATMUL, DType.FP32, {"m": 8}, 1.0, 1.0, 2.0, 1.5, 3.0, 5)
    inside, above, below = r.at_median(2.5), r.at_median(4.0), r.at_median(1.0)
    assert (inside.median_s, inside.p10_s, inside.p90_s) == (2.5, 1.5, 3.0)
    assert (above.median_s, above.p10_s, above.p90_s) == (4.0, 1.5, 4.0)
    assert (below.median_s, below.p10_s, below.p90_s) == (1.0, 1.0, 3.0)
    assert above.params == r.params and above.repeats == r.repeats
