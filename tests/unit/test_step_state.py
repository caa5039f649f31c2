"""An op's extra cost inside a training step (calibrate/bench_cold_calls.py): the fit from cold and warm
rows, the cost layer's split of a phase's bytes, and the optimizer's pass, all derived by hand."""

from __future__ import annotations

import pytest

from simtrain.calibrate.bench_memory import (
    DECAY_GAPS_S,
    EVICT_MAX_BYTES,
    EVICT_MIN_BYTES,
    FIXED_OP,
    OPTIMIZER_OPS,
    STEP_GAP_S,
    evict_bytes,
    fit_step_state,
)
from simtrain.calibrate.records import Row
from simtrain.glossary import DType, OpClass
from simtrain.specs.efficiency import ComputeCurve
from simtrain.specs.hardware import Efficiency


def _pair(op: str, numel: int, moved: float, cold_s: float, warm_s: float) -> list[Row]:
    return [Row("step_state", None, DType.FP32, {"op": op, "numel": numel, "cold": cold, "gap_s": STEP_GAP_S},
                0.0, moved, t, t, t, 5) for cold, t in ((True, cold_s), (False, warm_s))]


def test_fit_reads_the_fixed_cost_and_the_cold_rate_by_hand():
    rows = (_pair(FIXED_OP, 0, 18e3, 20e-6, 10e-6) + _pair("relu262144", 262144, 2.0e6, 110e-6, 20e-6)
            + _pair("relu1048576", 1048576, 8.0e6, 410e-6, 70e-6))
    got = fit_step_state(rows)
    assert got["step_call_overhead_s"] == pytest.approx(10e-6)  # 20 − 10 µs
    # 2e6 B / (110 − 10) µs = 20 GB/s; 8e6 B / (410 − 10) µs = 20 GB/s
    assert got["step_cold_bytes_per_s"] == pytest.approx(2.0e10)
    assert fit_step_state(rows[2:]) == {}  # no fixed op: nothing to read
    # the fixed op alone: its cost, no rate; a cold call quicker than the warm one costs nothing
    assert fit_step_state(_pair(FIXED_OP, 0, 18e3, 9e-6, 10e-6)) == {"step_call_overhead_s": 0.0}


def test_fit_reads_the_optimizer_steps_fixed_cost_by_hand():
    """The optimizer steps' cold − hot times, 0.40 and 0.50 ms: their median 0.45 ms; they are not
    streaming ops, so the cold rate still comes from the relu alone."""
    rows = (_pair(FIXED_OP, 0, 18e3, 20e-6, 10e-6) + _pair("relu262144", 262144, 2.0e6, 110e-6, 20e-6)
            + _pair(OPTIMIZER_OPS[0], 16384, 3.3e5, 460e-6, 60e-6) + _pair(OPTIMIZER_OPS[1], 16384, 4.6e5, 650e-6, 150e-6))
    got = fit_step_state(rows)
    assert got["step_optimizer_s"] == pytest.approx(450e-6)
    assert got["step_cold_bytes_per_s"] == pytest.approx(2.0e10)  # 2e6 B / (110 − 10) µs
    assert "step_optimizer_s" not in fit_step_state(rows[:4])  # measured before the optimizer pairs


def _optimizer_s(eff: Efficiency, optimizer: str = "adamw") -> float:
    import simtrain as st
    base = st.load_device("host-cpu")
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, optimizer=optimizer, precision="fp32",
                         grad_clipping=False, zero_grad_to_none=True)
    dev = base.model_copy(update={"efficiency": eff})
    return st.estimate(st.load_model("mlp-mnist"), st.Cluster.single(dev), cfg).time_breakdown_s["optimizer"]


def test_a_measured_in_step_optimizer_streams_warm_and_adds_its_fixed_cost():
    """With ``step_optimizer_s`` the update's bytes stream at the memory model, whatever the cold rate,
    plus the fixed cost once a step: the optimizer's seconds are the warm profile's plus exactly it."""
    import simtrain as st
    from simtrain.cost.compute import device_efficiency
    warm = device_efficiency(st.load_device("host-cpu"))
    measured = warm.model_copy(update={"step_optimizer_s": 4e-4, "step_cold_bytes_per_s": 1e8})
    assert _optimizer_s(measured) == pytest.approx(_optimizer_s(warm) + 4e-4, rel=1e-9)
    slower = measured.model_copy(update={"step_cold_bytes_per_s": 5e7})
    assert _optimizer_s(slower) == pytest.approx(_optimizer_s(measured), rel=1e-12)
    # without the measurement the cold rate prices the pass, as profiles fitted before did
    assert _optimizer_s(measured.model_copy(update={"step_optimizer_s": 0.0})) > _optimizer_s(measured)


def _relu_costs(eff: Efficiency):
    import simtrain as st
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    dev = st.load_device("host-cpu")
    op = make_op("relu", "r", "b", shape=(1000,))
    return dev, op, op_cost(op, 2, regime("fp32"), dev, eff)


def test_a_step_streams_all_but_the_previous_ops_tensor_at_the_cold_rate():
    from simtrain.cost.compute import memory_seconds
    warm = Efficiency(compute={OpClass.ELEMENTWISE: ComputeCurve(peak_fraction=1.0)}, memory_bandwidth_fraction=1.0,
                      memory_half_bytes=0.0, launch_overhead_s=1e-6)
    step = warm.model_copy(update={"step_call_overhead_s": 5e-6, "step_cold_bytes_per_s": 1e9})
    dev, _, a = _relu_costs(warm)
    _, _, b = _relu_costs(step)
    # relu over 2 samples × 1000 fp32: forward reads x (8 kB, the op before wrote it) and writes y (8 kB)
    fw_warm = memory_seconds(16e3, dev, warm)
    assert a.fw_s == pytest.approx(fw_warm + 1e-6)
    assert b.fw_s == pytest.approx(fw_warm / 2 + 8e3 / 1e9 + 1e-6 + 5e-6)
    # backward reads dY (the op after wrote it: warm) and the saved output y, writes dX: 16 kB cold
    assert b.agrad_s == pytest.approx(memory_seconds(24e3, dev, warm) / 3 + 16e3 / 1e9 + 1e-6 + 5e-6)


def test_the_optimizer_pass_streams_at_the_cold_rate():
    """Parameters and optimizer states were last touched a step ago: the update's bytes stream at the
    cold rate, so two cold rates a factor 2 apart differ by exactly half the pass's time."""
    import simtrain as st
    from simtrain.cost.compute import device_efficiency
    from simtrain.cost.optimizer import impl_of_config, impl_passes
    base = st.load_device("host-cpu")
    model = st.load_model("mlp-mnist")
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, optimizer="adamw", precision="fp32",
                         grad_clipping=False, zero_grad_to_none=True)

    def optimizer_s(rate: float) -> float:
        eff = device_efficiency(base).model_copy(update={"step_cold_bytes_per_s": rate})
        dev = base.model_copy(update={"efficiency": eff})
        return st.estimate(model, st.Cluster.single(dev), cfg).time_breakdown_s["optimizer"]

    moved = 4.0 * model.param_count * impl_passes("adamw", impl_of_config(cfg, base.kind), False)
    assert optimizer_s(1e8) - optimizer_s(2e8) == pytest.approx(moved / 1e8 - moved / 2e8, rel=1e-6)


def test_bench_times_a_cold_and_a_warm_call_of_each_op():
    pytest.importorskip("torch")
    from simtrain.calibrate.bench_memory import cold_pairs
    from simtrain.calibrate.measure import measure
    m = measure("cpu", grid="tiny", only=["step_state"], collectives=False)
    pairs = cold_pairs(m.rows)
    assert set(pairs) == {FIXED_OP, "relu65536", *OPTIMIZER_OPS}
    for cold, warm in pairs.values():
        assert cold.params["gap_s"] == STEP_GAP_S and cold.repeats == warm.repeats >= 5
        assert cold.bytes_moved == warm.bytes_moved > 0
    assert pairs["relu65536"][0].bytes_moved == 8 * 65536  # reads and writes 4 B per element
    assert set(fit_step_state(m.rows)) <= {"step_call_overhead_s", "step_cold_bytes_per_s", "step_optimizer_s",
                                           "step_call_half_gap_s"}
    # the fixed op is also timed cold after each of the other gaps, each with its hot partner
    gaps = {r.params["gap_s"] for r in m.rows if r.params.get("op") == FIXED_OP and r.params["cold"]}
    assert gaps == {STEP_GAP_S, *DECAY_GAPS_S}
    # a gap of a whole step read the eviction buffer first, a shorter one did not
    read = {r.params["gap_s"]: r.params["evict_bytes"] for r in m.rows if r.params.get("op") == FIXED_OP}
    assert read[STEP_GAP_S] >= EVICT_MIN_BYTES and all(read[g] == 0 for g in DECAY_GAPS_S if g < STEP_GAP_S)


def test_the_eviction_buffer_is_twice_the_last_level_cache_within_bounds():
    assert evict_bytes(32 * 2**20) == 64 * 2**20
    assert evict_bytes(96 * 2**20) == 192 * 2**20
    assert evict_bytes(0.0) == EVICT_MIN_BYTES  # sysfs named no cache
    assert evict_bytes(8 * 2**30) == EVICT_MAX_BYTES


def test_only_a_step_long_gap_reads_the_eviction_buffer(monkeypatch):
    """The filler reads its buffer (one ``sum``) before a gap of at least a step, never before a shorter
    one: a layer repeated within a step meets only part of the step's data in between."""
    torch = pytest.importorskip("torch")
    import simtrain.calibrate.bench_cold_calls as bench_cold
    run = bench_cold._filler(1 << 20)
    sums = []
    real_sum = torch.Tensor.sum
    monkeypatch.setattr(torch.Tensor, "sum", lambda self, *a, **k: sums.append(self.numel()) or real_sum(self, *a, **k))
    run(1e-4)
    assert sums == []
    run(STEP_GAP_S)
    assert sums == [(1 << 20) // 4]


def test_a_torch_without_cpu_fused_optimizers_skips_the_optimizer_pairs(monkeypatch):
    """Before torch 2.4 ``fused=True`` on CPU raises: the bench leaves the optimizer out and the fit
    then has no ``step_optimizer_s`` (the profile keeps the cold pass)."""
    torch = pytest.importorskip("torch")
    import simtrain.calibrate.bench_cold_calls as bench_cold

    def refuse(*args, **kwargs):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
    monkeypatch.setattr(torch.optim, "SGD", refuse)
    assert bench_cold._optimizer_calls() == []


def test_a_compute_bound_op_adds_its_cold_bytes_extra_time_to_its_compute():
    """A GEMM whose compute leg outlasts its memory leg: inside a step its phase takes the compute leg
    plus what its cold bytes cost over the warm memory model (``op_cost.cold_stall_seconds``), not the
    larger of the two legs; the warm profile (no cold rate) keeps the plain roofline."""
    import simtrain as st
    from simtrain.cost.compute import memory_seconds
    from simtrain.cost.op_cost import cold_stall_seconds, op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    dev = st.load_device("host-cpu")
    warm = Efficiency(compute={OpClass.MATMUL: ComputeCurve(peak_fraction=1e-3)}, memory_bandwidth_fraction=1.0,
                      memory_half_bytes=0.0, launch_overhead_s=0.0)
    step = warm.model_copy(update={"step_cold_bytes_per_s": 1e10})
    # 1 × (64 → 64) fp32 linear, no bias: the forward reads x (256 B, the op before wrote it: warm) and
    # W (16 KiB) and writes y (256 B): 16,896 bytes, 16,640 of them cold
    op = make_op("linear", "fc", "b", rows=1, in_features=64, out_features=64, bias=False)
    t_c = op_cost(op, 1, regime("fp32"), dev, warm).fw_s  # compute-bound: the compute leg alone
    moved, cold = 2 * 256 + 64 * 64 * 4, 256 + 64 * 64 * 4
    t_m = memory_seconds(moved, dev, warm) * 256 / moved + cold / 1e10
    assert t_c > memory_seconds(moved, dev, warm) and t_m < t_c
    stall = t_m - memory_seconds(moved, dev, warm)
    assert cold_stall_seconds(t_m, moved, dev, step) == pytest.approx(stall)
    assert op_cost(op, 1, regime("fp32"), dev, step).fw_s == pytest.approx(t_c + stall, rel=1e-9)
    assert cold_stall_seconds(t_m, moved, dev, warm) == 0.0


def test_a_step_gap_runs_its_small_kernels_for_the_whole_gap_after_the_eviction_read(monkeypatch):
    """The gap's clock starts after the read: where the read outlasts the gap (a 480 MiB L3 read twice)
    the cold call otherwise came straight after one long stream, ~140 µs dearer than after the same
    read and a gap of small kernels (bench_cold_calls._filler). A fake clock: the read takes 1 s."""
    torch = pytest.importorskip("torch")
    import simtrain.calibrate.bench_cold_calls as bench_cold
    clock = {"now": 0.0, "read_done": None}

    def perf_counter() -> float:
        clock["now"] += 1e-3  # each reading of the clock: 1 ms of kernels
        return clock["now"]
    real_sum = torch.Tensor.sum

    def read(self, *a, **k):
        clock["now"] += 1.0
        clock["read_done"] = clock["now"]
        return real_sum(self, *a, **k)
    monkeypatch.setattr(bench_cold.time, "perf_counter", perf_counter)
    run = bench_cold._filler(1 << 20)
    monkeypatch.setattr(torch.Tensor, "sum", read)
    run(STEP_GAP_S)
    assert clock["read_done"] is not None and clock["now"] - clock["read_done"] >= STEP_GAP_S
