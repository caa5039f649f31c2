"""The machine-speed sentinels and the re-measuring of groups timed in a slow spell (issue 12)."""

from __future__ import annotations

import pytest

import simtrain.calibrate.sentinels as sentinels
from simtrain.calibrate import measure as measure_mod
from simtrain.calibrate.records import Row
from simtrain.glossary import DType


def _reading(bench: str, seconds: float, after: str) -> Row:
    return Row(bench, None, DType.FP32, {"after": after}, 1.0, 1.0, seconds, seconds, seconds, 5)


def _pair(gemm_s: float, stream_s: float, after: str) -> list[Row]:
    return [_reading("sentinel_gemm", gemm_s, after), _reading("sentinel_stream", stream_s, after)]


def test_slowdowns_are_against_the_quickest_reading_of_each_workload():
    rows = _pair(1e-3, 2e-3, "start") + _pair(1.5e-3, 1e-3, "a") + _pair(1e-3, 4e-3, "b")
    best = sentinels.quickest(rows)
    assert best == {"sentinel_gemm": 1e-3, "sentinel_stream": 1e-3}
    assert sentinels.slowdowns(rows[4:], best) == pytest.approx({"sentinel_gemm": 1.0, "sentinel_stream": 4.0})
    # the stream's limit is 3: 4× is past it by 4 / 3; the GEMM's 1.5× is within its limit of 2
    assert sentinels.worst_slowdown(rows[4:], best) == pytest.approx(4.0 / 3.0)
    assert sentinels.worst_slowdown(rows[2:4], best) == pytest.approx(1.5 / 2.0)
    assert sentinels.over_limit(rows[4:], best) == ["the 64 MiB read 4.0× slower"]
    assert sentinels.over_limit(rows[2:4], best) == []


def test_take_times_the_three_workloads_tagged_with_the_group():
    pytest.importorskip("torch")
    from simtrain.calibrate.bench_ops import Bench, TimingPlan
    got = sentinels.take(Bench("cpu", TimingPlan(warmup=1, repeats=3, min_sample_s=0.0)), "conv2d")
    assert [r.bench for r in got] == ["sentinel_gemm", "sentinel_stream", "sentinel_dispatch"]
    assert all(r.params["after"] == "conv2d" and r.median_s > 0 and r.op_class is None for r in got)
    assert got[1].bytes_moved == sentinels.STREAM_BYTES
    assert got[2].params["numel"] == sentinels.DISPATCH_NUMEL


def test_the_dispatch_sentinel_tags_modes_and_never_sends_a_group_back():
    """A mode lasts minutes, so a slower dispatch call (even 10x) is no reason to measure again."""
    rows = [_reading("sentinel_dispatch", 3.6e-6, "a"), _reading("sentinel_dispatch", 36e-6, "b")]
    best = sentinels.quickest(rows)
    assert sentinels.slowdowns(rows[1:], best) == pytest.approx({"sentinel_dispatch": 10.0})
    assert sentinels.over_limit(rows[1:], best) == [] and sentinels.worst_slowdown(rows[1:], best) == 0.0


def test_a_group_closed_by_a_slow_sentinel_is_measured_again_and_the_quicker_attempt_kept(monkeypatch):
    """Event log: group b closes in a memory spell (stream 4× its quickest); it is re-run after the
    pause, the spell is over, and the second attempt's rows replace the first's. Group a is not re-run."""
    log: list[str] = []
    readings = iter([_pair(1e-3, 4e-3, "b"), _pair(1e-3, 1e-3, "b")])
    runs: list[str] = []

    def fake_attempt(bench, grid, name, log_):
        runs.append(name)
        return [_reading("rows_of_" + name, float(len(runs)), name)], next(readings)

    monkeypatch.setattr(measure_mod, "_attempt", fake_attempt)
    monkeypatch.setattr(measure_mod.time, "sleep", lambda s: log.append(f"sleep {s}"))
    opening = _pair(1e-3, 1e-3, "start")
    done = {"a": ([_reading("rows_of_a", 0.5, "a")], _pair(1e-3, 1.1e-3, "a")), "b": ([], [])}
    done["b"] = fake_attempt(None, None, "b", None)
    measure_mod._remeasure_slow(None, None, done, opening, log.append, attempts=2, pause_s=5.0)
    assert runs == ["b", "b"]
    assert log[0].startswith("b: measured in a slow spell (the 64 MiB read 4.0× slower)")
    assert log[1] == "sleep 5.0"
    assert done["b"][0][0].median_s == 2.0  # the second attempt's rows
    assert done["a"][0][0].bench == "rows_of_a"


def test_a_spell_that_outlasts_the_attempts_keeps_the_quickest_and_warns(monkeypatch):
    log: list[str] = []
    slow = iter([_pair(1e-3, 5e-3, "b"), _pair(1e-3, 4e-3, "b"), _pair(1e-3, 6e-3, "b")])
    monkeypatch.setattr(measure_mod, "_attempt", lambda bench, grid, name, log_: ([_reading("x", 1.0, name)], next(slow)))
    monkeypatch.setattr(measure_mod.time, "sleep", lambda s: None)
    done = {"b": ([_reading("first", 1.0, "b")], next(slow))}
    measure_mod._remeasure_slow(None, None, done, _pair(1e-3, 1e-3, "start"), log.append, attempts=2)
    assert sentinels.slowdowns(done["b"][1], {"sentinel_stream": 1e-3})["sentinel_stream"] == pytest.approx(4.0)
    assert log[-1] == "warning: b measured on a contended machine (the 64 MiB read 4.0× slower)"
