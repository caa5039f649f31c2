"""st.sweep keeps every point (bad ones with reasons); st.plan ranks feasible layouts by cost."""

import math

import pytest

import simtrain as st
from tests.conftest import invented_device, linear_op


@pytest.fixture(scope="module")
def tiny():
    ops = [linear_op(f"layers.{i}/fc", f"layers.{i}", 16, 256, 256) for i in range(4)]
    return st.Model("tiny", ops)


def test_sweep_rows_match_single_estimates(tiny):
    cluster = st.Cluster.single(invented_device())
    cfg = st.TrainConfig(global_batch_size=8, precision="fp32")
    df = st.sweep(tiny, cluster, cfg, grid={"micro_batch_size": [1, 2, 8], "optimizer": ["sgd", "adam"]})
    assert len(df) == 6 and df["feasible"].all()
    row = df[(df.micro_batch_size == 2) & (df.optimizer == "adam")].iloc[0]
    direct = st.estimate(tiny, cluster, st.TrainConfig(global_batch_size=8, precision="fp32", micro_batch_size=2,
                                                       optimizer="adam"))
    assert row.step_time_s == direct.step_time_s and row.mfu == direct.mfu


def test_sweep_keeps_bad_points_with_reasons(tiny):
    cluster = st.Cluster.single(invented_device())
    df = st.sweep(tiny, cluster, st.TrainConfig(global_batch_size=8), grid={"micro_batch_size": [3, 4], "tp": [1, 2]})
    assert len(df) == 4
    bad = df[df.micro_batch_size == 3]
    assert (~bad.feasible).all() and bad.reasons.str.contains("micro_batch_size=3 does not divide").all()
    assert math.isnan(bad.step_time_s.iloc[0])
    tp2 = df[(df.micro_batch_size == 4) & (df.tp == 2)].iloc[0]
    assert not tp2.feasible and "tp × pp × cp" in tp2.reasons


def test_sweep_over_nodes(tiny):
    cluster = st.load_cluster("dgx-a100-80gb", nodes=1)
    df = st.sweep(tiny, cluster, st.TrainConfig(global_batch_size=64), grid={"nodes": [1, 2]})
    assert list(df.feasible) == [True, True]
    assert df.step_time_s.iloc[1] < df.step_time_s.iloc[0]


def test_sweep_with_a_dask_client(tiny):
    distributed = pytest.importorskip("distributed")
    cluster = st.Cluster.single(invented_device())
    cfg = st.TrainConfig(global_batch_size=8, precision="fp32")
    grid = {"micro_batch_size": [1, 2, 4, 8]}
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        remote = st.sweep(tiny, cluster, cfg, grid, client=client)
    local = st.sweep(tiny, cluster, cfg, grid)
    assert list(remote.step_time_s) == list(local.step_time_s)


def test_plan_meets_the_deadline_and_ranks_by_device_hours():
    model = st.load_model("gpt2")
    p = st.plan(model, "dgx-a100-80gb", tokens=1e10, deadline_s=3 * 86400, global_batch_size=128, seq_len=1024,
                max_nodes=2, top=10)
    assert len(p) > 0 and (p.time_to_train_s <= 3 * 86400).all() and p.feasible.all()
    assert list(p.device_hours) == sorted(p.device_hours)
