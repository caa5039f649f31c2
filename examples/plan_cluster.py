"""Plan a cluster: how many DGX H100 nodes, and which layout, train GPT-2 XL on 20 B tokens in a week?

    python examples/plan_cluster.py

st.plan searches cluster sizes and parallel layouts and ranks the feasible ones (fastest first).
"""

import simtrain as st

model = st.load_model("gpt2-xl")
plan = st.plan(model, "dgx-h100", tokens=20e9, deadline_s=7 * 86400, global_batch_size=512, seq_len=1024,
               max_nodes=8, top=5)
columns = ["nodes", "devices", "tp", "pp", "dp", "micro_batch_size", "step_time_s", "mfu", "time_to_train_s",
           "device_hours"]
print(plan[[c for c in columns if c in plan.columns]].to_string())
