"""Wafer-scale weight streaming (hardware.md §7): weights, gradients and optimizer state live in
MemoryX; each micro-batch streams weights in (forward and backward) and gradients out over the
150 GB/s system I/O, hidden behind the wafer's compute when that is longer."""

import pytest

import simtrain as st


@pytest.fixture(scope="module")
def run():
    cluster = st.load_cluster("cs-3-cluster", nodes=1)
    model = st.load_model("gpt2-xl")
    cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=8, seq_len=1024, recompute="full")
    return model, cluster, st.estimate(model, cluster, cfg)


def test_parameters_live_off_wafer(run):
    model, cluster, r = run
    m = r.memory
    assert m.params_bytes == m.grads_bytes == m.optimizer_bytes == 0
    # 16-bit weights + 16-bit grads + fp32 accumulation + fp32 master and Adam moments
    assert m.external_bytes == pytest.approx(model.param_count * (2 + 2 + 4 + 4 + 8), rel=1e-6)
    assert m.external_capacity_bytes == cluster.device.memory_external.usable_bytes
    assert r.feasible


def test_streaming_floor_per_micro_batch(run):
    model, cluster, r = run
    stream = next(c for c in r.comm if c.axis == "stream")
    from simtrain.cost.compute import device_efficiency
    eff = device_efficiency(cluster.device)
    rate = cluster.device.memory_external.bandwidth_bytes_per_s.value * eff.link_bandwidth_fraction
    micro_batches = r.layout["micro_batches"]
    # forward: 2 B/param in; backward: max(2 B in, 2 B out) — full duplex
    assert stream.total_s == pytest.approx(micro_batches * 2 * 2 * model.param_count / rate, rel=1e-6)
    assert r.time_breakdown_s["optimizer"] == 0  # the update runs in MemoryX
