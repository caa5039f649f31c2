"""Sweep what-ifs: GPT-2 medium on one DGX H100 — how do tensor parallelism and the micro-batch size
change step time, MFU and memory?

    python examples/whatif_sweep.py
"""

import simtrain as st

model = st.load_model("gpt2-medium")
cluster = st.load_cluster("dgx-h100", nodes=1)
cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=1024)
df = st.sweep(model, cluster, cfg, grid={"tp": [1, 2, 4], "micro_batch_size": [1, 2, 4]})
print(df[["tp", "micro_batch_size", "step_time_s", "mfu", "memory_reserved_bytes", "memory_fits",
          "bottleneck"]].to_string())
best = df[df.feasible].sort_values("step_time_s").iloc[0]
print(f"fastest: tp={best.tp}, micro_batch_size={best.micro_batch_size}, {best.step_time_s * 1e3:.1f} ms per step")
