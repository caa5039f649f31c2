"""Configurations per second: the scalar estimate (``st.estimate`` per point) vs the vectorized one
(search/vector.py), and the time of the 64-GPU search space. Prints rates and the machine.

The 64-GPU space (Llama-3-70B, seq 8,192, global batch 512, 8 × DGX-H100 = 64 H100s) is the cartesian
product a search lists, axis by axis:

    tp ∈ {1,2,4,8,16,32,64} × pp ∈ {1,…,64} (7) × dp ∈ {1,…,64} (7) × micro-batch ∈ {1,…,64} (7)
    × recompute {none, selective, full} × ZeRO {0,1,2,3} × virtual stages {1,2,4,5,8,10}
    (interleaved 1F1B when > 1) × SP {off, on}                                = 345,744 points
    × software stack (7 presets: megatron-core, fsdp2, fsdp2-compile, deepspeed, ddp, llm-foundry,
      megatron-lm)                                                           = 2,420,208 points

Most points are not runnable layouts (tp·pp·dp ≠ 64, micro-batch not dividing the replica batch,
pp·v beyond the 82 blocks): they are rejected with the scalar path's reason after one check per
distinct layout. The script says how many points were runnable and costed.

    python benchmarks/bench_vector.py            # both spaces (about a minute on one core)
    python benchmarks/bench_vector.py --quick    # the scalar-vs-vector rate only
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import simtrain as st
from simtrain.search.vector import estimate_grid, estimate_points

P = [1, 2, 4, 8, 16, 32, 64]
STACKS = ["megatron-core", "fsdp2", "fsdp2-compile", "deepspeed", "ddp", "llm-foundry", "megatron-lm"]


def scalar_vs_vector(model, cluster, cfg) -> None:
    """The same runnable points both ways: a 64-GPU layout grid where every point is a real job."""
    grid = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "micro_batch_size": [1, 2, 4], "zero_stage": [0, 1, 2, 3],
            "recompute": ["none", "selective", "full"], "sequence_parallel": [False, True]}
    df = estimate_grid(model, cluster, cfg, grid)  # warm the model graph and topologies, as a sweep would
    start = time.perf_counter()
    df = estimate_grid(model, cluster, cfg, grid)
    vec_s = time.perf_counter() - start
    rows = df[["tp", "pp", "micro_batch_size", "zero_stage", "recompute", "sequence_parallel"]].to_dict("records")
    sample = rows[:: max(1, len(rows) // 200)]
    start = time.perf_counter()
    for p in sample:
        st.estimate(model, cluster, cfg.model_copy(update=p))
    scalar_s = (time.perf_counter() - start) / len(sample)
    print(f"scalar    : {1 / scalar_s:12,.0f} configurations/s  ({len(sample)} points, st.estimate each)")
    print(f"vectorized: {len(df) / vec_s:12,.0f} configurations/s  ({len(df)} points, all runnable, "
          f"{vec_s:.2f} s)  ×{scalar_s * len(df) / vec_s:.0f}")
    fresh = [dict(p, global_batch_size=256) for p in rows]  # nothing memoised for these yet
    start = time.perf_counter()
    estimate_points(model, cluster, cfg, fresh)
    print(f"vectorized, cold pieces: {len(fresh) / (time.perf_counter() - start):,.0f} configurations/s")


def space(model, cluster, cfg, stacks: bool) -> None:
    grid = {"tp": P, "pp": P, "dp": P, "micro_batch_size": P, "recompute": ["none", "selective", "full"],
            "zero_stage": [0, 1, 2, 3], "virtual_stages": [1, 2, 4, 5, 8, 10], "sequence_parallel": [False, True]}
    if stacks:
        grid["stack"] = STACKS
    start = time.perf_counter()
    out = estimate_grid(model, cluster, cfg, grid, frame=False)
    took = time.perf_counter() - start
    n = len(out["valid"])
    print(f"64-GPU space{' × 7 stacks' if stacks else ''}: {n:,} points in {took:.1f} s ({n / took:,.0f} /s); "
          f"{int(out['valid'].sum()):,} runnable layouts costed ({out['valid'].sum() / took:,.0f} /s), "
          f"{int(out['feasible'].sum()):,} fit in memory")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    model, cluster = st.load_model("llama3-70b"), st.load_cluster("dgx-h100", nodes=8)
    cfg = st.TrainConfig(global_batch_size=512, seq_len=8192)
    scalar_vs_vector(model, cluster, cfg)
    if not args.quick:
        space(model, cluster, cfg, stacks=False)
        space(model, cluster, cfg, stacks=True)


if __name__ == "__main__":
    main()
