"""Sweep throughput, configurations/s: the local loop, and Dask on a LocalCluster (2 worker processes,
1 thread each) with the chunked path (model scattered once) and with the old one task per point
(issue 14 measured Dask 37–49× slower than local that way). Prints rates, ratios and the machine.

    python benchmarks/bench_sweep.py            # needs dask[distributed]
"""

from __future__ import annotations

import logging
import os
import platform
import time

import simtrain as st
from simtrain.search.sweep_rows import evaluate_point, grid_points

MODEL, CLUSTER, NODES = "gpt2-medium", "dgx-h100", 4  # 32 GPUs
CFG = st.TrainConfig(global_batch_size=128, seq_len=1024)
GRID = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "micro_batch_size": [1, 2, 4, 8], "zero_stage": [0, 1, 2, 3],
        "recompute": ["none", "selective", "full"], "global_batch_size": [128, 256, 512]}  # 1,728 points


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def per_point_map(client, model, cluster, points) -> list[dict]:
    """The pre-issue-14 path: one task per point, model and cluster pickled into every task."""
    futures = client.map(evaluate_point, [model] * len(points), [cluster] * len(points), [CFG] * len(points),
                         points, pure=False)
    return client.gather(futures)


def worker_rss(client) -> float:
    """Resident memory of all the workers, bytes (psutil ships with distributed)."""
    return sum(client.run(lambda: __import__("psutil").Process().memory_info().rss).values())


def main() -> None:
    from distributed import Client, LocalCluster
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
          f"(shared with other work when noted), python {platform.python_version()}")
    model, cluster = st.load_model(MODEL), st.load_cluster(CLUSTER, nodes=NODES)
    n = len(grid_points(GRID))
    st.sweep(model, cluster, CFG, {"tp": [1]}, progress=False)  # warm: imports, model graph
    local_s, df = timed(lambda: st.sweep(model, cluster, CFG, GRID, progress=False))
    print(f"{n:,} points ({(df.status == 'ok').sum():,} feasible), {MODEL} on {NODES} × {CLUSTER}")
    print(f"  local loop:                 {n / local_s:8,.0f} configurations/s")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as lc, \
            Client(lc) as client:
        client.run(lambda: __import__("simtrain.estimator"))  # warm the workers' imports
        dask_s, remote = timed(lambda: st.sweep(model, cluster, CFG, GRID, client=client, progress=False))
        assert remote.equals(df), "Dask rows differ from the local loop"
        print(f"  Dask, chunked, scattered:   {n / dask_s:8,.0f} configurations/s "
              f"(local / Dask = {dask_s / local_s:.2f}×)")
        rss = [worker_rss(client)]
        for _ in range(4):  # each sweep is a new model copy on the workers; the last two are kept
            st.sweep(model, cluster, CFG, GRID, client=client, progress=False)
            rss.append(worker_rss(client))
        steps = ", ".join(f"{(b - a) / 2**20:+.0f}" for a, b in zip(rss, rss[1:], strict=False))
        print(f"  workers' memory after each of 4 more sweeps: {steps} MiB (both workers)")
        subset = grid_points(GRID)[:40]
        old_s, _ = timed(lambda: per_point_map(client, model, cluster, subset))
        print(f"  Dask, one task per point:   {len(subset) / old_s:8,.0f} configurations/s "
              f"(local / Dask = {(old_s / len(subset)) / (local_s / n):.1f}×; the pre-issue-14 path, 40 points)")


if __name__ == "__main__":
    main()
