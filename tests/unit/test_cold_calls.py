"""In-step launch costs that depend on the gap since a kernel of the same signature last ran
(cost.compute.cold_call_scale, parallel/cold_calls.py, calibrate/bench_memory.fit_half_gap), by hand."""

from __future__ import annotations

import pytest

from simtrain.calibrate.bench_memory import (
    DECAY_GAPS_S,
    FIXED_OP,
    HALF_GAP_GRID_S,
    STEP_GAP_S,
    cold_pairs,
    fit_half_gap,
)
from simtrain.calibrate.records import Row
from simtrain.cost.compute import COLD_GAP_CAP_S, COLD_REFERENCE_GAP_S, cold_call_scale
from simtrain.cost.op_cost import OpCost
from simtrain.glossary import DType, OpClass
from simtrain.graph.model import Model
from simtrain.graph.rules.registry import make_op
from simtrain.parallel.cold_calls import cold_calls, kernel_counts
from simtrain.specs.efficiency import ComputeCurve
from simtrain.specs.hardware import Efficiency


def _eff(half_s: float, call_s: float = 10e-6) -> Efficiency:
    return Efficiency(compute={OpClass.ELEMENTWISE: ComputeCurve(peak_fraction=1.0)},
                      step_call_overhead_s=call_s, step_call_half_gap_s=half_s)


def test_the_scale_is_one_at_the_reference_gap_and_saturates_by_hand():
    eff = _eff(5e-3)
    assert COLD_REFERENCE_GAP_S == 0.02 and COLD_GAP_CAP_S == 0.06
    assert cold_call_scale(0.02, eff) == pytest.approx(1.0)
    # φ(5 ms) / φ(20 ms) = (5 / 10) / (20 / 25) = 0.625
    assert cold_call_scale(5e-3, eff) == pytest.approx(0.625)
    # beyond 60 ms the gap is held there: (60 / 65) / (20 / 25) = 1.1538…
    assert cold_call_scale(0.5, eff) == pytest.approx(60 / 65 / 0.8)
    assert cold_call_scale(0.0, eff) == 0.0
    # no measured half gap: every launch pays the flat cost, whatever its gap (profiles fitted before)
    assert cold_call_scale(1e-5, _eff(0.0)) == 1.0


def _rows(diffs: dict[float, float], hot_s: float = 5e-6) -> list[Row]:
    return [Row("step_state", None, DType.FP32, {"op": FIXED_OP, "numel": 0, "cold": cold, "gap_s": g},
                0.0, 18e3, t, t, t, 5) for g, d in diffs.items() for cold, t in ((True, hot_s + d), (False, hot_s))]


def test_the_fit_recovers_the_half_gap_of_a_saturating_cost():
    half = HALF_GAP_GRID_S[120]  # 10^-2 s on the grid
    gaps = (*DECAY_GAPS_S, STEP_GAP_S)
    got = fit_half_gap(_rows({g: 30e-6 * g / (g + half) for g in gaps}))
    assert got == {"step_call_half_gap_s": pytest.approx(half)}
    # the extra gaps do not disturb the reference pair the flat cost is read from
    assert set(cold_pairs(_rows({g: 1e-6 for g in gaps}))) == {FIXED_OP}
    assert cold_pairs(_rows({g: 1e-6 for g in gaps}))[FIXED_OP][0].params["gap_s"] == STEP_GAP_S


def test_the_fit_needs_three_gaps_and_a_cost_that_grows():
    assert fit_half_gap(_rows({STEP_GAP_S: 10e-6, 1e-3: 2e-6})) == {}  # measured before: one or two gaps
    assert fit_half_gap(_rows({g: -1e-7 for g in (*DECAY_GAPS_S, STEP_GAP_S)})) == {}  # never slower cold


def _model(repeats: int) -> Model:
    """``repeats`` relus of one shape (one signature) and one of another."""
    ops = [make_op("relu", f"b.{i}/relu", f"b.{i}", shape=(64,)) for i in range(repeats)]
    return Model("m", ops + [make_op("relu", "head/relu", "head", shape=(128,))])


def _warm(op) -> OpCost:
    return OpCost(10e-6, 10e-6, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)  # 10 µs per phase, one launch each


def test_each_op_pays_at_its_own_gap_and_the_cycle_is_a_fixed_point():
    eff = _eff(5e-3)
    model = _model(4)
    assert sorted(kernel_counts(model).values()) == [1, 4]
    cold = cold_calls(model, _warm, eff)
    # the cycle holds the warm time (5 ops × 20 µs) and every launch at its gap: 2 launches per op
    repeated, single = model.ops[0], model.ops[-1]
    at_repeated = 10e-6 * cold_call_scale(cold.cycle_s / 4, eff)
    at_single = 10e-6 * cold_call_scale(cold.cycle_s, eff)
    assert cold.cycle_s == pytest.approx(100e-6 + 4 * 2 * at_repeated + 2 * at_single, rel=1e-9)
    assert cold.of(repeated, eff) == pytest.approx(at_repeated)
    assert cold.of(single, eff) == pytest.approx(at_single)
    assert cold.of(repeated, eff) < cold.of(single, eff)  # the repeated kernel ran more recently


def test_a_step_estimate_is_unchanged_without_a_half_gap_and_lighter_with_one():
    import simtrain as st
    from simtrain.cost.compute import device_efficiency
    base = st.load_device("host-cpu")
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, optimizer="adamw", precision="fp32",
                         grad_clipping=False, zero_grad_to_none=True)
    flat = device_efficiency(base).model_copy(update={"step_call_overhead_s": 12e-6, "step_optimizer_s": 3e-4})

    def step_s(eff: Efficiency) -> dict:
        dev = base.model_copy(update={"efficiency": eff})
        return st.estimate(st.load_model("mlp-mnist"), st.Cluster.single(dev), cfg).time_breakdown_s
    a, b = step_s(flat), step_s(flat.model_copy(update={"step_call_half_gap_s": 0.0}))
    assert a == b
    # a millisecond-scale step: every gap is far below 20 ms, so launches and the optimizer pay less
    c = step_s(flat.model_copy(update={"step_call_half_gap_s": 5e-3}))
    assert c["compute"] < a["compute"] and c["optimizer"] < a["optimizer"]


def test_closed_form_and_simulator_charge_the_same_gap_scaled_costs():
    import simtrain as st
    from simtrain.cost.compute import device_efficiency
    base = st.load_device("host-cpu")
    eff = device_efficiency(base).model_copy(update={"step_call_overhead_s": 12e-6, "step_optimizer_s": 3e-4,
                                                     "step_call_half_gap_s": 5e-3})
    cluster = st.Cluster.single(base.model_copy(update={"efficiency": eff}))
    for batch in (8, 32):  # one micro-batch, and four accumulated (the optimizer's gap is the whole step)
        cfg = dict(global_batch_size=batch, micro_batch_size=8, optimizer="adamw", precision="fp32")
        model = st.load_model("mlp-mnist")
        assert st.simulate(model, cluster, cfg).step_time_s == pytest.approx(st.estimate(model, cluster, cfg).step_time_s,
                                                                            rel=1e-9)


def test_adam_takes_adamws_fitted_per_tensor_overhead_where_only_adamw_was_benched():
    from simtrain.cost.optimizer import tensor_overhead_seconds
    eff = _eff(0.0).model_copy(update={"optimizer_tensor_overhead_s": {"adamw/fused": 4e-6, "sgd/foreach": 1e-7}})
    assert tensor_overhead_seconds("adam", "fused", 10, eff) == pytest.approx(40e-6)  # shared host code
    assert tensor_overhead_seconds("adamw", "fused", 10, eff) == pytest.approx(40e-6)
    assert tensor_overhead_seconds("momentum", "fused", 10, eff) == 0.0  # nothing measured for it
    own = eff.model_copy(update={"optimizer_tensor_overhead_s": {"adamw/fused": 4e-6, "adam/fused": 5e-6}})
    assert tensor_overhead_seconds("adam", "fused", 10, own) == pytest.approx(50e-6)  # its own wins
    from simtrain.cost.optimizer import step_overhead_seconds
    steps = eff.model_copy(update={"optimizer_step_overhead_s": {"momentum/fused": 3e-5}})
    assert step_overhead_seconds("sgd", "fused", steps) == pytest.approx(3e-5)  # SGD's one function
    assert step_overhead_seconds("momentum", "fused", steps) == pytest.approx(3e-5)
    assert step_overhead_seconds("adamw", "fused", steps) == 0.0


def test_layers_of_an_imported_model_share_a_signature_whatever_their_module_path():
    """The torch importer records each op's module path (``attrs["module"]``): a name, left out of the
    signature, so a chain of equal Linear → ReLU blocks counts each kernel once per block. With the path
    in it every layer was its model's only one, paid its launch at the whole step's gap, and the
    validation's overhead chain came out over-predicted at depth (a negative per-launch slope)."""
    torch = pytest.importorskip("torch")
    import simtrain as st
    from simtrain.parallel.model_index import op_signature
    from validation.overhead import _loss, chain
    model = st.Model.from_torch(chain(4), (torch.randn(2, 8),), _loss, name="chain4")
    assert {dict(op.attrs).get("module") for op in model.ops if op.kind == "linear"} == {"0", "2", "4", "6"}
    counts = kernel_counts(model)
    relu = next(op for op in model.ops if op.kind == "relu")
    assert counts[op_signature(relu)] == 4  # every ReLU: equal shapes, four module paths
    # the linears: the first has no input gradient, the other three are one kernel
    assert sorted(counts[op_signature(op)] for op in model.ops if op.kind == "linear") == [1, 3, 3, 3]
