"""Estimates per second on one core: a 24-layer transformer on one device (issue target ≥ 2,000/s)
and GPT-3 175B on 1,024 A100s in 3D parallelism (target ≥ 1,000/s). Prints rates and the machine.

    python benchmarks/bench_estimate.py
"""

from __future__ import annotations

import os
import platform
import time

import simtrain as st


def rate(fn, seconds: float = 3.0) -> float:
    fn()  # warm caches (model graph, topology) as a sweep would
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    gpt2m = st.load_model("gpt2-medium")  # 24 layers
    one = st.Cluster.single(st.load_device("a100-sxm4-80gb"))
    cfg1 = st.TrainConfig(global_batch_size=8, micro_batch_size=8, seq_len=1024)
    r1 = rate(lambda: st.estimate(gpt2m, one, cfg1))
    print(f"24-layer transformer, one device: {r1:,.0f} estimates/s (target 2,000)")
    gpt3 = st.load_model("gpt3-175b")
    cluster = st.load_cluster("dgx-a100-80gb", nodes=128)
    cfg3 = st.TrainConfig(global_batch_size=1536, micro_batch_size=1, seq_len=2048, tp=8, pp=8,
                          recompute="full")
    r3 = rate(lambda: st.estimate(gpt3, cluster, cfg3))
    print(f"GPT-3 175B, 1,024 GPUs, tp 8 pp 8 dp 16, repeated: {r3:,.0f} estimates/s (target 1,000)")
    # a sweep visits each layout once: distinct configs, caches cold per config (warm per model)
    configs = [st.TrainConfig(global_batch_size=gb, micro_batch_size=mb, seq_len=2048, tp=tp, pp=pp,
                              zero_stage=z, recompute=rc)
               for gb in (1536, 3072) for mb in (1, 2) for tp in (4, 8) for pp in (4, 8, 16)
               for z in (0, 1) for rc in ("selective", "full")]
    start = time.perf_counter()
    for c in configs:
        st.estimate(gpt3, cluster, c)
    r4 = len(configs) / (time.perf_counter() - start)
    print(f"GPT-3 175B, a sweep of {len(configs)} distinct 3D layouts: {r4:,.0f} estimates/s")


if __name__ == "__main__":
    main()
