"""Batch-size sweep: Llama-3-8B on two DGX H100 nodes (16 GPUs, TP 2, ZeRO-1, selective recompute) —
how do the global and the micro-batch size change throughput, MFU and memory, and which fit?

The rows stream to a Parquet file; running the sweep again resumes from it (nothing is recomputed).

    python examples/sweep_batch_size.py
"""

import tempfile
import time
from pathlib import Path

import simtrain as st
from simtrain.report.sweep_table import render_sweep

model = st.load_model("llama3-8b")
cluster = st.load_cluster("dgx-h100", nodes=2)
cfg = st.TrainConfig(global_batch_size=64, seq_len=4096, tp=2, zero_stage=1, recompute="selective",
                     sequence_parallel=True)
grid = {"global_batch_size": [64, 128, 256, 512], "micro_batch_size": [1, 2, 4, 8]}

with tempfile.TemporaryDirectory() as folder:
    out = Path(folder) / "batch_sweep.parquet"
    df = st.sweep(model, cluster, cfg, grid, out=out)
    start = time.perf_counter()
    again = st.sweep(model, cluster, cfg, grid, out=out)  # every row is in the file already
    resumed_s = time.perf_counter() - start
    assert again.equals(df)

print(render_sweep(df, sort="tokens_per_s", top=8))
print()
print("global batch → best micro-batch (tokens/s per GPU, MFU, reserved memory):")
for gbs, rows in df[df.feasible].groupby("global_batch_size"):
    best = rows.sort_values("tokens_per_s").iloc[-1]
    print(f"  {gbs:4d} → mb {best.micro_batch_size}: {best.tokens_per_s / best.devices_count:8,.0f} tok/s/GPU, "
          f"MFU {best.mfu:.1%}, {best.memory_reserved_bytes / 2**30:.1f} GiB")
print(f"\nresuming the finished sweep from {out.name} took {resumed_s * 1e3:.0f} ms")
