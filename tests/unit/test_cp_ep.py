"""Context parallelism (ring attention), expert parallelism (all-to-all), and the attention kernel switch."""

import pytest

import simtrain as st


@pytest.fixture(scope="module")
def h100x4():
    return st.load_cluster("dgx-h100", nodes=4)


def _moe(cluster, **kw):
    cfg = st.TrainConfig(global_batch_size=128, micro_batch_size=1, seq_len=4096, tp=2, pp=2, zero_stage=1,
                         recompute="selective", sequence_parallel=True, **kw)
    return st.estimate(st.load_model("mixtral-8x7b"), cluster, cfg)


def test_expert_parallelism_spreads_expert_weights_not_work(h100x4):
    one, four = _moe(h100x4), _moe(h100x4, ep=4)
    assert four.memory.params_bytes < one.memory.params_bytes / 2.5  # experts are ~96 % of Mixtral
    assert four.time_breakdown_s["compute"] == pytest.approx(one.time_breakdown_s["compute"], rel=1e-9)
    ep = next(c for c in four.comm if c.axis == "ep")
    assert ep.total_s > 0 and ep.exposed_s == pytest.approx(ep.total_s)  # all-to-all sits on the critical path
    assert not any(c.axis == "ep" for c in one.comm)


def test_load_imbalance_slows_the_expert_compute(h100x4):
    fair, skewed = _moe(h100x4, ep=4), _moe(h100x4, ep=4, moe_load_imbalance=1.5)
    assert skewed.step_time_s > fair.step_time_s
    assert skewed.memory.params_bytes == fair.memory.params_bytes


def _long(cluster, cp):
    cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=32768, tp=4, cp=cp, recompute="selective",
                         sequence_parallel=True, flash_attention=True)
    return st.estimate(st.load_model("llama3-8b"), cluster, cfg)


def test_context_parallelism_shards_activations_and_hides_kv_passing(h100x4):
    r1, r2 = _long(h100x4, 1), _long(h100x4, 2)
    assert r2.memory.activations_bytes == pytest.approx(r1.memory.activations_bytes / 2, rel=0.05)
    cp = next(c for c in r2.comm if c.axis == "cp")
    assert 0 < cp.total_s and cp.exposed_s <= cp.total_s
    assert r2.layout["dp"] == r1.layout["dp"] // 2


def test_cp_needs_divisible_sequence(h100x4):
    cfg = st.TrainConfig(global_batch_size=64, seq_len=1000, tp=4, cp=8)
    r = st.estimate(st.load_model("llama3-8b"), h100x4, cfg)
    assert not r.feasible and any("cp=8 needs seq_len divisible" in x for x in r.reasons)


def test_flash_attention_switch_rebuilds_the_graph(h100x4):
    def run(flash):
        cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=8192, tp=4, flash_attention=flash)
        return st.estimate(st.load_model("llama3-8b"), h100x4, cfg)
    materialised, fused = run(False), run(True)
    assert fused.memory.activations_bytes < materialised.memory.activations_bytes / 2
    assert fused.step_time_s < materialised.step_time_s
    assert fused.model_flops_per_step == materialised.model_flops_per_step
