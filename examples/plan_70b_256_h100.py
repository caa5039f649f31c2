"""TP × PP × DP for a 70B model on 256 H100s (32 DGX H100 nodes): every layout, costed at once.

    python examples/plan_70b_256_h100.py

The vectorized estimate (simtrain.search.vector) costs the whole grid with st.estimate's own rules;
dp is whatever the 256 devices leave after tp × pp. Prints the fastest layouts that fit in memory.
"""

import simtrain as st
from simtrain.search.vector import estimate_grid

model = st.load_model("llama3-70b")
cluster = st.load_cluster("dgx-h100", nodes=32)
cfg = st.TrainConfig(global_batch_size=1024, seq_len=8192, stack="megatron-core")
grid = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "micro_batch_size": [1, 2, 4],
        "virtual_stages": [1, 2, 4], "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
        "sequence_parallel": [False, True]}
df = estimate_grid(model, cluster, cfg, grid)
fits = df[df.feasible].sort_values("step_time_s")
print(f"{len(df)} layouts, {int(df.valid.sum())} runnable, {len(fits)} fit in 80 GB")
best = fits.drop_duplicates(subset=["tp", "pp", "dp"]).head(10).copy()
best["memory_GiB"] = best.memory_reserved_bytes / 2**30
best["tokens_per_s"] = best.tokens_per_s.round(0)
print(best[["tp", "pp", "dp", "micro_batch_size", "virtual_stages", "sequence_parallel", "zero_stage", "recompute",
            "step_time_s", "mfu", "memory_GiB", "tokens_per_s"]].to_string(index=False, float_format="%.3f"))
