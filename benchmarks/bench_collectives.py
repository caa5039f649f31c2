"""Rates of the collective cost model on one core (prints calls per second; asserts nothing).

    .venv/bin/python benchmarks/bench_collectives.py

The estimator needs ≥ 1,000 3D-parallel GPT-3-scale estimates per second; each asks for the topology
of up to five groups and a few dozen collectives, most of them repeats (memoised)."""

from __future__ import annotations

import time

import simtrain as st
from simtrain.cost import collectives as coll
from simtrain.cost.collectives import collective_time
from simtrain.parallel.topology import group_topology, p2p_time


def rate(label: str, fn, n: int) -> None:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    dt = time.perf_counter() - t0
    print(f"{label:<58s} {n / dt:>12,.0f} /s  ({dt / n * 1e6:7.2f} µs each)")


def main() -> None:
    cluster = st.load_cluster("dgx-a100-80gb", nodes=128)
    layout = {"tp": 8, "pp": 8, "dp": 16}
    tp, dp = group_topology(cluster, layout, "tp"), group_topology(cluster, layout, "dp")
    two = group_topology(cluster, {"tp": 2, "pp": 8, "dp": 64}, "dp")
    rate("group_topology (cached, dict layout)", lambda i: group_topology(cluster, layout, "dp"), 50_000)
    rate("collective_time all_reduce tp8 (memoised size)", lambda i: collective_time("all_reduce", 1e8, tp), 100_000)
    coll._cached.cache_clear()
    rate("collective_time all_reduce dp16, auto, new sizes", lambda i: collective_time("all_reduce", 1e6 + i, dp), 50_000)
    rate("collective_time all_reduce 2-tier dp64, auto, new sizes",
         lambda i: collective_time("all_reduce", 1e6 + i, two), 20_000)
    rate("collective_time all_to_all 2-tier, new sizes", lambda i: collective_time("all_to_all", 1e6 + i, two), 20_000)
    rate("p2p_time network, new sizes", lambda i: p2p_time(1e6 + i, cluster, "network"), 50_000)


if __name__ == "__main__":
    main()
