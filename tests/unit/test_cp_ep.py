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


# --- EP all-to-all volume, by hand (GShard §2.2; Megatron-core MoE token dispatcher) ------------

S, H, A, V = 8, 16, 4, 32  # tiny MoE transformer: seq, hidden, heads, vocab


def _tiny_moe(experts=4, top_k=2):
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 2, "hidden": H, "heads": A, "vocab": V, "ffn_hidden": 32, "activation": "swiglu",
         "biases": False, "moe": {"experts": experts, "top_k": top_k}}
    return build_model(ModelSpec.model_validate({"name": "tiny-moe", "family": "transformer", "seq_len": S,
                                                 "transformer": t}))


def _ep_program(model, ep=2, cp=1, tp=2, mb=2):
    from simtrain.estimator import build_program
    cluster = st.load_cluster("dgx-h100", nodes=1)  # 8 ranks: dp = 8 / tp, ep carved out of dp × cp
    cfg = st.TrainConfig(global_batch_size=16, micro_batch_size=mb, tp=tp, cp=cp, ep=ep, sequence_parallel=True,
                         precision="bf16")
    return build_program(model, cluster, cfg), cluster, cfg


def _ep_tasks_of(program):
    return [t for stage in program.stages for t in stage.comm if t.axis == "ep"]


def test_ep_alltoall_bytes_are_the_routed_tokens_hand_derived():
    """Per rank and micro-batch: T = b·s/(cp·tp) = 2·8/2 = 8 tokens, each to k = 2 experts, h = 16,
    bf16: S = 8·16·2·2 = 512 bytes per all-to-all; 2 MoE layers × (dispatch + combine) = 4 in forward,
    4 in backward. (The old code sent op.act_read.fw, the expert FFN's whole input traffic.)"""
    from simtrain.cost.collectives import collective_time
    from simtrain.parallel.comm import comm_for
    program, cluster, cfg = _ep_program(_tiny_moe())
    tasks = _ep_tasks_of(program)
    assert [(t.phase, t.kind, t.bytes, t.count) for t in tasks] == [("fw", "alltoall", 512.0, 4),
                                                                      ("bw", "alltoall", 512.0, 4)]
    comm = comm_for(cluster, program.layout, cfg, program.efficiency)
    one = collective_time("alltoall", 512.0, comm.topology("ep"), efficiency=comm.eff)
    assert one.ranks == 2
    # S includes the rank's own share; the collective sends (ep − 1)/ep of it, once
    assert sum(one.bytes_sent_per_rank.values()) == pytest.approx(512.0 * (2 - 1) / 2)
    for t in tasks:
        assert t.seconds == pytest.approx(one.seconds, rel=1e-12)
        assert t.total_s == pytest.approx(4 * one.seconds, rel=1e-12) and t.exposed_s == t.total_s


def test_ep_alltoall_bytes_scale_with_tokens_not_with_cp_tp_shards():
    """cp = 2 halves each rank's tokens (b·s/cp); tp = 1 doubles them (no sequence shard)."""
    model = _tiny_moe()
    assert [t.bytes for t in _ep_tasks_of(_ep_program(model, cp=2)[0])] == [256.0, 256.0]
    assert [t.bytes for t in _ep_tasks_of(_ep_program(model, tp=1)[0])] == [1024.0, 1024.0]


def test_ep_volume_depends_on_top_k_not_on_the_number_of_experts():
    def vol(experts, top_k):
        return [(t.bytes, t.count) for t in _ep_tasks_of(_ep_program(_tiny_moe(experts, top_k))[0])]
    assert vol(4, 2) == vol(8, 2) == vol(16, 2) == [(512.0, 4), (512.0, 4)]
    assert vol(8, 1) == [(256.0, 4), (256.0, 4)]


def test_ep_one_issues_no_alltoall():
    program, _, _ = _ep_program(_tiny_moe(), ep=1)
    assert _ep_tasks_of(program) == []


def test_full_recompute_repeats_the_forward_alltoalls():
    from simtrain.estimator import build_program
    model, cluster = _tiny_moe(), st.load_cluster("dgx-h100", nodes=1)
    cfg = st.TrainConfig(global_batch_size=16, micro_batch_size=2, tp=2, ep=2, sequence_parallel=True,
                         precision="bf16", recompute="full")
    tasks = _ep_tasks_of(build_program(model, cluster, cfg))
    assert [(t.phase, t.bytes, t.count) for t in tasks] == [("fw", 512.0, 4), ("bw", 512.0, 4),
                                                            ("recompute", 512.0, 4)]
