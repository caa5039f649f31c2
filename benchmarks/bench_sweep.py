"""Sweep throughput through ``st.sweep`` itself (the default ``auto`` engine), on one core, and Dask.

Issue 39's bars: the 245,760-point what-if grid a user writes for Llama-3-8B on 64 H100s in ≤ 5 s,
and the 2.4M-point 64-GPU space of ``bench_vector.py`` (Llama-3-70B) in ≤ 30 s — wall time of the
call, DataFrame and point keys included, with the rate of runnable (costed) points printed apart.
``--dask`` adds the old comparison of the estimate engine's local loop with Dask (chunked, and one
task per point).

    python benchmarks/bench_sweep.py            # ~30 s
    python benchmarks/bench_sweep.py --dask     # needs dask[distributed]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import time

import simtrain as st
from simtrain.search.sweep_rows import evaluate_point, grid_points

WHAT_IF = {  # Llama-3-8B on 8 × DGX-H100: 4·4·2·4·3·4·2·2·5·2·2·2 = 245,760 points
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2], "micro_batch_size": [1, 2, 4, 8],
    "recompute": ["none", "selective", "full"], "zero_stage": [0, 1, 2, 3], "sequence_parallel": [False, True],
    "pipeline_schedule": ["1f1b", "gpipe"], "global_batch_size": [64, 128, 256, 512, 1024],
    "precision": ["bf16", "fp8"], "dp_overlap": [False, True], "fused_optimizer": [False, True]}
P = [1, 2, 4, 8, 16, 32, 64]
SPACE = {  # bench_vector.py's 64-GPU space × 7 stacks: 2,420,208 points (Llama-3-70B, 8 × DGX-H100)
    "tp": P, "pp": P, "dp": P, "micro_batch_size": P, "recompute": ["none", "selective", "full"],
    "zero_stage": [0, 1, 2, 3], "virtual_stages": [1, 2, 4, 5, 8, 10], "sequence_parallel": [False, True],
    "stack": ["megatron-core", "fsdp2", "fsdp2-compile", "deepspeed", "ddp", "llm-foundry", "megatron-lm"]}

MODEL, CLUSTER, NODES = "gpt2-medium", "dgx-h100", 4  # the Dask comparison: 32 GPUs
CFG = st.TrainConfig(global_batch_size=128, seq_len=1024)
GRID = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "micro_batch_size": [1, 2, 4, 8], "zero_stage": [0, 1, 2, 3],
        "recompute": ["none", "selective", "full"], "global_batch_size": [128, 256, 512]}  # 1,728 points


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def one_grid(label: str, model, cluster, cfg, grid: dict, bar_s: float) -> None:
    n = math.prod(len(v) for v in grid.values())
    took, df = timed(lambda: st.sweep(model, cluster, cfg, grid, progress=False))
    counts = df.status.value_counts().to_dict()
    costed = counts.get("ok", 0) + int(((df.status == "infeasible") & df.step_time_s.notna()).sum())
    print(f"{label}: {n:,} points in {took:.1f} s (bar {bar_s:.0f} s: {'met' if took <= bar_s else 'MISSED'}), "
          f"{n / took:,.0f} points/s; {costed:,} runnable layouts costed ({costed / took:,.0f} /s), "
          f"{counts.get('ok', 0):,} fit in memory; statuses {counts}")


def sweeps() -> None:
    llama8 = st.load_model("llama3-8b")
    h100x64 = st.load_cluster("dgx-h100", nodes=8)
    st.sweep(llama8, h100x64, st.TrainConfig(global_batch_size=256, seq_len=8192), {"tp": [1]}, progress=False)
    one_grid("what-if grid, Llama-3-8B on 64 H100", llama8, h100x64,
             st.TrainConfig(global_batch_size=256, seq_len=8192), WHAT_IF, 5.0)
    one_grid("64-GPU space × 7 stacks, Llama-3-70B", st.load_model("llama3-70b"), h100x64,
             st.TrainConfig(global_batch_size=512, seq_len=8192), SPACE, 30.0)


def per_point_map(client, model, cluster, points) -> list[dict]:
    """The pre-issue-14 path: one task per point, model and cluster pickled into every task."""
    futures = client.map(evaluate_point, [model] * len(points), [cluster] * len(points), [CFG] * len(points),
                         points, pure=False)
    return client.gather(futures)


def worker_rss(client) -> float:
    """Resident memory of all the workers, bytes (psutil ships with distributed)."""
    return sum(client.run(lambda: __import__("psutil").Process().memory_info().rss).values())


def dask_comparison() -> None:
    from distributed import Client, LocalCluster
    model, cluster = st.load_model(MODEL), st.load_cluster(CLUSTER, nodes=NODES)
    n = len(grid_points(GRID))
    sweep = lambda **kw: st.sweep(model, cluster, CFG, GRID, engine="estimate", progress=False, **kw)  # noqa: E731
    st.sweep(model, cluster, CFG, {"tp": [1]}, engine="estimate", progress=False)  # warm: imports, model graph
    local_s, df = timed(sweep)
    print(f"Dask: {n:,} points ({(df.status == 'ok').sum():,} feasible), {MODEL} on {NODES} × {CLUSTER}, "
          "estimate engine")
    print(f"  local loop:                 {n / local_s:8,.0f} configurations/s")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as lc, Client(lc) as client:
        client.run(lambda: __import__("simtrain.estimator"))  # warm the workers' imports
        dask_s, remote = timed(lambda: sweep(client=client))
        assert remote.equals(df), "Dask rows differ from the local loop"
        print(f"  Dask, chunked, scattered:   {n / dask_s:8,.0f} configurations/s "
              f"(local / Dask = {dask_s / local_s:.2f}×)")
        rss = [worker_rss(client)]
        for _ in range(4):  # each sweep is a new model copy on the workers; the last two are kept
            sweep(client=client)
            rss.append(worker_rss(client))
        steps = ", ".join(f"{(b - a) / 2**20:+.0f}" for a, b in zip(rss, rss[1:], strict=False))
        print(f"  workers' memory after each of 4 more sweeps: {steps} MiB (both workers)")
        subset = grid_points(GRID)[:40]
        old_s, _ = timed(lambda: per_point_map(client, model, cluster, subset))
        print(f"  Dask, one task per point:   {len(subset) / old_s:8,.0f} configurations/s "
              f"(local / Dask = {(old_s / len(subset)) / (local_s / n):.1f}×; the pre-issue-14 path, 40 points)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dask", action="store_true", help="also compare the local loop with Dask")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the bars are for one core
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (this run pinned to "
          f"one), python {platform.python_version()}")
    sweeps()
    if args.dask:
        dask_comparison()


if __name__ == "__main__":
    main()
