"""Invariants of the distributed estimate (hypothesis), on GPT-2-medium-sized work over DGX A100 nodes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import simtrain as st
from simtrain.parallel.schedule import bubble_fraction

SETTINGS = settings(max_examples=25, deadline=None)


@pytest.fixture(scope="module")
def model():
    return st.load_model("gpt2-medium")


def _scaled_links(cluster: st.Cluster, k: float) -> st.Cluster:
    def scale(link):
        data = link.model_dump()
        for key in ("bandwidth_per_direction_bytes_per_s", "bandwidth_bidirectional_bytes_per_s"):
            if data.get(key):
                data[key]["value"] *= k
        return st.Link.model_validate(data)
    fabric = cluster.node.fabric.model_copy(update={"link": scale(cluster.node.fabric.link)})
    node = cluster.node.model_copy(update={"fabric": fabric})
    net = cluster.network.model_copy(update={"nic_link": scale(cluster.network.nic_link)})
    return cluster.model_copy(update={"node": node, "network": net, "name": f"{cluster.name}-x{k:g}"})


layouts = hs.sampled_from([dict(tp=1, pp=1), dict(tp=2, pp=2), dict(tp=8, pp=1), dict(tp=4, pp=4), dict(tp=1, pp=8)])


@SETTINGS
@given(layout=layouts, k=hs.floats(1.0, 8.0), zero=hs.sampled_from([0, 1, 3]))
def test_faster_links_never_slow_a_step(model, layout, k, zero):
    cluster = st.load_cluster("dgx-a100-80gb", nodes=2)
    cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=1024, zero_stage=zero, **layout)
    slow = st.estimate(model, cluster, cfg).step_time_s
    fast = st.estimate(model, _scaled_links(cluster, k), cfg).step_time_s
    assert fast <= slow * (1 + 1e-9)


def _cluster_of(devices: int) -> st.Cluster:
    """DGX A100 nodes; fewer than 8 devices make one partial node."""
    base = st.load_cluster("dgx-a100-80gb", nodes=max(1, devices // 8))
    if devices >= 8:
        return base
    return base.model_copy(update={"node": base.node.model_copy(update={"devices_count": devices})})


@SETTINGS
@given(tp=hs.sampled_from([1, 2, 4]), pp=hs.sampled_from([1, 2, 4]), zero=hs.sampled_from([0, 1, 2]))
def test_memory_never_grows_with_more_tp_pp_or_zero(model, tp, pp, zero):
    """At a fixed data-parallel degree (more TP or PP means more devices, not fewer replicas).

    dp = 4: at dp = 2 ZeRO-3 can lose on a stage made of one big unit (a tied LM-head copy): it saves
    half the parameters but gathers the two largest units whole, the price FSDP really pays."""
    def mem(**kw):
        fields = dict(global_batch_size=64, micro_batch_size=1, seq_len=1024, tp=tp, pp=pp, dp=4, zero_stage=zero)
        fields.update(kw)
        cluster = _cluster_of(fields["dp"] * fields["tp"] * fields["pp"])
        r = st.estimate(model, cluster, st.TrainConfig(**fields))
        assert r.feasible, r.reasons
        return r.memory.total_bytes - r.memory.overhead_bytes

    base = mem()
    assert mem(tp=tp * 2) <= base * (1 + 1e-9)
    assert mem(pp=pp * 2) <= base * (1 + 1e-9)
    assert mem(zero_stage=zero + 1) <= base * (1 + 1e-9)


@given(p=hs.integers(2, 64), v=hs.integers(1, 4))
def test_bubble_vanishes_with_many_microbatches(p, v):
    fractions = [bubble_fraction(p, m, v) for m in (1, 10, 100, 10_000, 10**7)]
    assert all(a > b for a, b in zip(fractions, fractions[1:], strict=False))
    assert fractions[-1] < 1e-5


@SETTINGS
@given(dp=hs.sampled_from([1, 2, 4]))
def test_doubling_dp_at_fixed_batch_halves_per_rank_compute(model, dp):
    def compute(d):
        cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=1024, tp=8, dp=d)
        return st.estimate(model, _cluster_of(8 * d), cfg).time_breakdown_s["compute"]
    assert compute(dp) == pytest.approx(2 * compute(2 * dp), rel=1e-9)
