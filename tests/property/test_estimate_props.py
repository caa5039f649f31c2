"""Invariants of the one-device estimate (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st_

import simtrain as st
from simtrain.cost.compute import op_seconds
from simtrain.glossary import OpClass
from simtrain.graph.op import Op, PhaseCounts
from tests.conftest import invented_device, linear_op, relu_op

SETTINGS = settings(max_examples=40, deadline=None)


def _model(width: int, depth: int) -> st.Model:
    ops = []
    for i in range(depth):
        ops += [linear_op(f"layers.{i}/fc", f"layers.{i}", 8, width, width), relu_op(f"layers.{i}/act", f"layers.{i}", 8 * width)]
    return st.Model("prop", ops)


def _device(peak: float, bw: float, frac: float = 0.7, half: float = 1e6):
    eff = {"compute": {c.value: {"peak_fraction": frac, "half_flops": half} for c in OpClass},
           "memory_bandwidth_fraction": 0.9, "memory_half_bytes": 1e4, "launch_overhead_s": 1e-6}
    s = lambda v: {"value": v, "source": "property test", "mark": "U"}  # noqa: E731
    return invented_device(peak_flops_per_s={"fp32": s(peak), "bf16": s(4 * peak)},
                           memory=[{"name": "hbm", "level": "hbm", "capacity_bytes": s(1e12),
                                    "bandwidth_bytes_per_s": s(bw)}], efficiency=eff)


cfgs = st_.builds(lambda b, prec, rec: st.TrainConfig(global_batch_size=b, micro_batch_size=b, precision=prec,
                                                      optimizer="adam", recompute=rec),
                  st_.sampled_from([1, 2, 4, 16, 64]), st_.sampled_from(["fp32", "bf16"]),
                  st_.sampled_from(["none", "full"]))


@SETTINGS
@given(width=st_.sampled_from([16, 64, 256]), depth=st_.integers(1, 4), cfg=cfgs,
       peak=st_.floats(1e11, 1e15), bw=st_.floats(1e9, 1e13), k=st_.floats(1.0, 10.0))
def test_more_flops_or_bandwidth_never_slows(width, depth, cfg, peak, bw, k):
    model = _model(width, depth)
    base = st.estimate(model, st.Cluster.single(_device(peak, bw)), cfg).step_time_s
    assert st.estimate(model, st.Cluster.single(_device(peak * k, bw)), cfg).step_time_s <= base * (1 + 1e-12)
    assert st.estimate(model, st.Cluster.single(_device(peak, bw * k)), cfg).step_time_s <= base * (1 + 1e-12)


@SETTINGS
@given(width=st_.sampled_from([16, 64, 256]), depth=st_.integers(1, 4), cfg=cfgs,
       peak=st_.floats(1e11, 1e15), bw=st_.floats(1e9, 1e13))
def test_mfu_at_most_one_and_recompute_never_raises_activations(width, depth, cfg, peak, bw):
    model, cluster = _model(width, depth), st.Cluster.single(_device(peak, bw, frac=1.0, half=0.0))
    r = st.estimate(model, cluster, cfg)
    assert 0 < r.mfu <= 1 + 1e-12 and r.mfu <= r.hfu + 1e-12
    for policy in ("selective", "full"):
        other = st.estimate(model, cluster, st.TrainConfig(**{**cfg.model_dump(), "recompute": policy}))
        assert other.memory.activations_bytes <= r.memory.activations_bytes or cfg.recompute.value == "full"


@SETTINGS
@given(width=st_.sampled_from([16, 64]), depth=st_.integers(1, 3), b=st_.integers(1, 32))
def test_memory_monotone_in_batch(width, depth, b):
    model, cluster = _model(width, depth), st.Cluster.single(_device(1e13, 1e12))
    cfg = lambda n: st.TrainConfig(global_batch_size=n, micro_batch_size=n)  # noqa: E731
    assert st.estimate(model, cluster, cfg(b + 1)).memory.total_bytes >= st.estimate(model, cluster, cfg(b)).memory.total_bytes


@SETTINGS
@given(elems=st_.integers(1, 10**8))
def test_zero_flop_ops_still_cost_bytes(elems):
    dev = _device(1e13, 1e12)
    t = op_seconds(0.0, 4.0 * elems, OpClass.MEMORY, dev)
    assert t > 4.0 * elems / 1e12
    copy = Op("copy", "copy", OpClass.MEMORY, "layers.0", PhaseCounts(), PhaseCounts(elems, 0, 0), PhaseCounts(elems, 0, 0))
    r = st.estimate(st.Model("copy", [copy]), st.Cluster.single(dev), st.TrainConfig(global_batch_size=1, precision="fp32"))
    assert r.time_breakdown_s["compute"] > 0
