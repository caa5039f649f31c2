"""Heterogeneous replicas: the slowest sets the pace (chapter §8.6.1, A100 + V100)."""

import pytest

import simtrain as st
from simtrain.parallel.hetero import estimate_heterogeneous
from tests.conftest import invented_device, linear_op


def _dev(peak):
    s = lambda v: {"value": v, "source": "hetero test", "mark": "U"}  # noqa: E731
    return invented_device(name=f"d{int(peak / 1e12)}", peak_flops_per_s={"fp32": s(peak), "bf16": s(peak)},
                           memory=[{"name": "hbm", "level": "hbm", "capacity_bytes": s(1e11),
                                    "bandwidth_bytes_per_s": s(1e15)}])


def test_faster_replicas_wait_for_the_slowest():
    """A group 1.7× faster idles 1 − 1/1.7 = 41 % of each step; with as many fast as slow devices
    the cluster loses (0.41 + 0) / 2 = 20.6 % — inside the chapter's "20–30 %"."""
    model = st.Model("m", [linear_op("layers.0/fc", "layers.0", 64, 1024, 1024)])
    fast, slow = st.Cluster.single(_dev(1.7e12)), st.Cluster.single(_dev(1e12))
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=4, precision="fp32", optimizer="sgd")
    h = estimate_heterogeneous(model, [fast, slow], cfg)
    assert h.slowest == 1
    assert h.groups[0].global_batch_size == h.groups[1].global_batch_size == 4
    compute_ratio = h.groups[1].time_breakdown_s["compute"] / h.groups[0].time_breakdown_s["compute"]
    assert compute_ratio == pytest.approx(1.7, rel=1e-6)
    assert h.idle_fraction[0] == pytest.approx(1 - h.groups[0].step_time_s / h.groups[1].step_time_s)
    assert 0.35 < h.idle_fraction[0] < 0.42 and h.idle_fraction[1] == 0
    assert 0.2 <= 1 - h.utilization <= 0.3
