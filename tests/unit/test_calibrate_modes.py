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
