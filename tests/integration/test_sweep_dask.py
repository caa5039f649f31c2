"""st.sweep on a dask.distributed LocalCluster: same rows as the local loop, chunked, and a worker
killed mid-sweep loses no row (the scheduler reruns its chunk on another worker)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pandas as pd
import pytest

import simtrain as st

distributed = pytest.importorskip("distributed")

GRID = {"micro_batch_size": [1, 2, 4, 8], "tp": [1, 2, 4], "zero_stage": [0, 1, 2],
        "recompute": ["none", "selective", "full"], "global_batch_size": [64, 128]}  # 216 points
CFG = {"global_batch_size": 64, "seq_len": 1024}


def _slow_down():
    """Run on each worker: every point takes ~25 ms more, so that the sweep outlives the kill."""
    from simtrain.search import sweep_rows
    real = sweep_rows.evaluate_point

    def slow(*args, **kwargs):
        time.sleep(0.025)
        return real(*args, **kwargs)

    sweep_rows.evaluate_point = slow


@pytest.mark.timeout(180)  # a hang here (e.g. a lost scatter) must fail CI, not stall it
def test_a_killed_worker_loses_no_row(tmp_path):
    out = tmp_path / "sweep.parquet"
    parts = out.with_name(out.name + ".parts")
    cluster = st.load_cluster("dgx-h100", nodes=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as lc, distributed.Client(lc) as client:
        client.run(_slow_down)
        pids = client.run(os.getpid)
        killed: list[int] = []

        def kill_one_worker_once_rows_stream():
            deadline = time.monotonic() + 30
            while not list(parts.glob("part-*.parquet")) and time.monotonic() < deadline:
                time.sleep(0.05)
            pid = sorted(pids.values())[0]
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, time.monotonic()))

        killer = threading.Thread(target=kill_one_worker_once_rows_stream)
        killer.start()
        # the scalar engine: _slow_down stretches its points (the auto engine's chunk would end too soon)
        remote = st.sweep("gpt2", cluster, CFG, GRID, engine="estimate", client=client, out=out, chunk_size=6,
                          progress=False)
        finished = time.monotonic()
        killer.join()
        (pid, when), = killed
        assert when < finished and pid not in client.run(os.getpid).values()  # it did die mid-sweep
    local = st.sweep("gpt2", cluster, CFG, GRID, progress=False)
    assert len(remote) == 216 and (remote.status == "ok").all() and remote.point_key.is_unique
    pd.testing.assert_frame_equal(remote, local)


@pytest.mark.parametrize("engine", ["auto", "estimate"])
def test_threads_client_matches_local_with_chunks(engine):
    cluster = st.load_cluster("dgx-h100", nodes=1)
    grid = {"micro_batch_size": [1, 2, 4], "tp": [1, 2, 3, 8], "stack": ["fsdp2", "megatron-core"]}
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        remote = st.sweep("gpt2", cluster, CFG, grid, engine=engine, client=client, chunk_size=5)
    local = st.sweep("gpt2", cluster, CFG, grid)  # the default engine, in this process
    assert set(remote.status) == {"ok", "infeasible"}
    pd.testing.assert_frame_equal(remote, local)
