"""The MaxText (JAX / XLA) preset for TPUs: one compiled program (no host dispatch), FSDP sharding,
fp32 weights and gradients, no caching-allocator reserve (issue 40)."""

import simtrain as st
from simtrain.specs.stack import load_stack


def test_the_preset_says_what_maxtext_base_config_does():
    s = load_stack("maxtext")
    assert s.host_dispatch_s == 0.0 and s.zero_stage == 3 and s.grad_fp32_buffer and s.fused_optimizer
    assert s.allocator_reserve_fraction == 0.0 and "base.yml" in s.source


def test_a_tpu_job_with_it_is_feasible_and_faster_than_eager_dispatch():
    cluster = st.load_cluster("tpu-v5p-pod", nodes=8)
    cfg = {"global_batch_size": 256, "seq_len": 4096, "recompute": "full"}
    xla = st.estimate("llama3-8b", cluster, {**cfg, "stack": "maxtext"})
    eager = st.estimate("llama3-8b", cluster, {**cfg, "stack": "fsdp2"})
    assert xla.feasible and xla.stack == "maxtext" and xla.time_breakdown_s["host_gaps"] == 0.0
    assert xla.step_time_s < eager.step_time_s  # no per-op dispatch, fused elementwise, no fitted idle share
