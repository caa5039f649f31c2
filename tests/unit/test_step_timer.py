"""st.time_steps: warm-up untimed, one sample per step, fresh pages counted on CPU, a RunRecord out."""

import sys
import time

import pytest

import simtrain as st
from simtrain.calibrate.step_timer import StepTimes, time_steps
from simtrain.errors import SpecError


def test_warmup_runs_untimed_and_each_step_is_one_sample():
    calls = []

    def step():
        calls.append(time.perf_counter())
        time.sleep(0.002)

    t = time_steps(step, warmup=2, steps=5)
    assert len(calls) == 7 and t.steps == 5 and t.warmup == 2 and len(t.samples_s) == 5
    # each sample holds one 2 ms sleep: never less; a noisy 2-core machine stays far under a second
    assert all(0.002 <= s < 1.0 for s in t.samples_s)
    assert t.p10_s <= t.median_s <= t.p90_s and t.ci_low_s <= t.median_s <= t.ci_high_s
    assert t.peak_memory_bytes is None  # no counter on CPU


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read()
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mmap threshold is a Linux fact")
def test_a_fresh_64_mib_tensor_per_step_faults_its_pages():
    torch = pytest.importorskip("torch")
    nbytes = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB): mapped fresh every call

    def fresh():
        torch.ones(nbytes // 4)

    keep = torch.empty(nbytes // 4)

    def reused():
        keep.fill_(1.0)

    t_fresh, t_reused = time_steps(fresh, steps=3), time_steps(reused, steps=3)
    # every 4 KiB page of the new tensor faults once; where huge pages back every anonymous map one
    # fault maps 2 MiB, and the count only has to be above the reused buffer's
    if "[always]" in _thp_mode():
        assert t_fresh.fresh_bytes_per_step > t_reused.fresh_bytes_per_step
    else:
        assert t_fresh.fresh_bytes_per_step >= 0.9 * nbytes
    assert t_reused.fresh_bytes_per_step < 0.1 * nbytes
    assert len(t_fresh.fresh_bytes) == 3


def test_record_is_a_run_record_of_the_median():
    t = StepTimes(median_s=0.02, p10_s=0.019, p90_s=0.03, ci_low_s=0.019, ci_high_s=0.021,
                  samples_s=(0.019, 0.02, 0.03), warmup=1, device="cpu")
    cluster = st.Cluster.single(st.load_device("host-cpu"))
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8)
    rec = t.record(st.load_model("mlp-mnist"), cluster, cfg, name="mine")
    assert isinstance(rec, st.RunRecord) and rec.step_time_s == 0.02 and rec.name == "mine"
    assert rec.peak_memory_bytes is None
    assert "3 steps after 1 warm-up on cpu: median 20.000 ms" in t.summary()
    assert t.fresh_bytes_per_step is None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"step": 3}, "step"), ({"device": "tpu"}, "device"), ({"warmup": -1}, "warmup"), ({"steps": 0}, "steps"),
    ({"steps": True}, "steps"), ({"warmup": 1.5}, "warmup"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"step": lambda: None, **kwargs}
    with pytest.raises(SpecError) as err:
        time_steps(**args)
    assert err.value.fields == [field]


def test_front_door():
    assert st.time_steps is time_steps and st.StepTimes is StepTimes


def test_validation_report_attributes_the_unmodelled_faults():
    from validation.report import Case
    from validation.steps import fresh_pages_markdown
    # 48 MiB faulted a step on average, 16 MiB of them charged; the other 32 MiB at 4 GiB/s = 7.81 ms
    # of a 100 ms step
    detail = {"fresh_bytes_per_step": 40 * 2**20, "fresh_bytes_mean": 48 * 2**20,
              "first_touch_charged_s": 16 * 2**20 / 2**32, "first_touch_bytes_per_s": 2.0**32}
    lines = fresh_pages_markdown([Case("m/medium b8", "step_time", 0.09, 0.1, detail=detail),
                                  Case("m/medium b8", "flops", 1.0, 1.0)])
    assert lines[-1] == "| m/medium b8 | 40.0 / 48.0 | 16.0 | 7.81 ms (7.8 % of the step) | -10.0 % |  |"
    # with rounds: each round's mean fresh MiB per step beside its step time; a round without the counter '?'
    rounds = dict(detail, rounds_fresh_bytes=[48 * 2**20, None, 0.0], rounds_s=[0.1, 0.125, 0.0905])
    lines = fresh_pages_markdown([Case("m/medium b8", "step_time", 0.09, 0.1, detail=rounds)])
    assert lines[-1].endswith("| -10.0 % | 48 @ 100.0, ? @ 125.0, 0 @ 90.5 |")
    assert fresh_pages_markdown([Case("x", "step_time", 1.0, 1.0, detail={"fresh_bytes_mean": None})]) == []


def test_the_machine_load_while_the_steps_ran(monkeypatch):
    """Steal and other processes' share come from /proc/stat snapshots around the timed steps:
    1000 ticks pass, 100 of them stolen, 200 idle; this process used 5 CPU-seconds of 2 cores × 10 s."""
    from simtrain.calibrate import step_timer
    from simtrain.calibrate.robust import CpuTicks, Snapshot
    shots = iter([Snapshot(CpuTicks(total=1000, idle=400, steal=0), own_cpu_s=0.0, wall_s=0.0, loadavg_1min=None),
                  Snapshot(CpuTicks(total=2000, idle=600, steal=100), own_cpu_s=5.0, wall_s=10.0, loadavg_1min=None)])
    monkeypatch.setattr(step_timer, "snapshot", lambda: next(shots))
    monkeypatch.setattr(step_timer.os, "cpu_count", lambda: 2)
    t = time_steps(lambda: None, warmup=0, steps=3)
    assert t.steal_fraction == pytest.approx(0.1)  # 100 of 1000 ticks
    # busy = 1000 − 200 idle − 100 stolen = 70 % of all ticks; this process 5 s / (10 s × 2 cores) = 25 %
    assert t.other_cpu_fraction == pytest.approx(0.45)
    assert "CPU steal 10.0 %, other processes 45.0 % of the cores" in t.summary()


def test_without_proc_stat_the_load_is_unknown(monkeypatch):
    from simtrain.calibrate import step_timer
    from simtrain.calibrate.robust import Snapshot
    monkeypatch.setattr(step_timer, "snapshot", lambda: Snapshot(None, 0.0, 0.0, None))
    t = time_steps(lambda: None, warmup=0, steps=2)
    assert t.steal_fraction is None and t.other_cpu_fraction is None and "steal" not in t.summary()
