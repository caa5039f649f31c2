"""Calibrate on your runs: two measured step times of GPT-2 on one A100 node fit simtrain's
efficiency factors; the calibrated cluster then predicts a third configuration.

    python examples/calibrate_on_runs.py

The "measured" times below stand in for your own logs (seconds per optimizer step).
"""

import simtrain as st

model = st.load_model("gpt2")
cluster = st.load_cluster("dgx-a100-80gb", nodes=1)


def config(micro_batch_size: int) -> st.TrainConfig:
    return st.TrainConfig(global_batch_size=64, micro_batch_size=micro_batch_size, seq_len=1024)


runs = [st.RunRecord(model=model, cluster=cluster, config=config(2), step_time_s=0.104, name="mb2"),
        st.RunRecord(model=model, cluster=cluster, config=config(4), step_time_s=0.095, name="mb4")]
cal = st.calibrate_runs(runs)
print("fitted factors:", cal.factors)

third = config(8)
before = st.estimate(model, cluster, third).step_time_s
after = st.estimate(model, cal.apply(cluster), third).step_time_s
print(f"micro-batch 8: {before * 1e3:.1f} ms uncalibrated, {after * 1e3:.1f} ms calibrated")
