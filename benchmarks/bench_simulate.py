"""Scale of the discrete-event engine on one core (issue 13): one step of Llama-3-405B on 16,384 H100s
(tp 8, pp 16, dp 128, interleaved 1F1B; target ≤ 10 s), 100,000 micro-batches (target ≤ 60 s), cost
linear in micro-batches and flat in the data-parallel degree; agreement with the estimate. Prints
the figures and the machine.

    python benchmarks/bench_simulate.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import simtrain as st


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def llama405b(contention: bool, granularity: str = "chunk") -> None:
    model = st.load_model("llama3-405b")
    cluster = st.load_cluster("dgx-h100", nodes=2048)
    cfg = st.TrainConfig(global_batch_size=2048, micro_batch_size=1, seq_len=8192, tp=8, pp=16,
                         pipeline_schedule="interleaved-1f1b", virtual_stages=4, sequence_parallel=True,
                         recompute="full", zero_stage=1)
    s, cold = timed(lambda: st.simulate(model, cluster, cfg, contention=contention,  # builds the program
                                        granularity=granularity))
    e = st.estimate(model, cluster, cfg)
    _, warm = timed(lambda: st.simulate(model, cluster, cfg, contention=contention, granularity=granularity))
    tasks = 2 * 16 * 4 * s.layout["micro_batches"]
    print(f"Llama-3-405B, {cluster.devices_count:,} H100s, tp 8 pp 16 dp 128 v 4, m {s.layout['micro_batches']}, "
          f"contention {'on' if contention else 'off'}, granularity {granularity}: {cold:.2f} s cold / {warm:.2f} s warm "
          f"(target 10 s; {tasks:,} tasks, {len(s.timeline.events):,} slices); "
          f"step {s.step_time_s:.4f} s, simulate/estimate {s.step_time_s / e.step_time_s:.9f}")


def microbatches(m: int, trace: bool, dp: int = 2) -> float:
    model = st.load_model("gpt2")
    cluster = st.load_cluster("dgx-h100", nodes=max(1, dp * 4 // 8))
    cfg = st.TrainConfig(global_batch_size=m * dp, micro_batch_size=1, seq_len=1024, pp=4, dp=dp)
    e = st.estimate(model, cluster, cfg)
    s, sec = timed(lambda: st.simulate(model, cluster, cfg, trace=trace))
    ratio = s.step_time_s / e.step_time_s
    print(f"  gpt2 pp 4 dp {dp:>4}, {m:>7,} micro-batches, trace {'on ' if trace else 'off'}: {sec:7.2f} s "
          f"({8 * m / sec:,.0f} tasks/s), simulate/estimate {ratio:.12f}")
    return sec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the 100,000 micro-batch runs")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    llama405b(False)
    llama405b(True)
    llama405b(False, "op")  # one slice per op of every task (issue 39)
    llama405b(True, "op")
    print("linear in micro-batches (time per micro-batch should stay flat):")
    sizes = (1_000, 4_096, 16_000) if args.quick else (1_000, 4_096, 16_000, 100_000)
    per = [microbatches(m, trace=False) / m for m in sizes]
    print(f"  seconds per micro-batch, largest / smallest: {per[-1] / per[0]:.2f}")
    if not args.quick:
        sec = microbatches(100_000, trace=True)
        print(f"100,000 micro-batches with the full timeline: {sec:.1f} s (target 60 s)")
    print("flat in the data-parallel degree (1,000 micro-batches):")
    times = [microbatches(1_000, trace=False, dp=dp) for dp in (2, 64, 1024)]
    print(f"  dp 1024 / dp 2: {times[-1] / times[0]:.2f}")


if __name__ == "__main__":
    main()
