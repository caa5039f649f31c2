"""The models of 2026 (issue 40, item 4): Mixtral 8x22B, Qwen3 dense and MoE, Llama 4 Scout and
Maverick (text models), DeepSeek-V3 (MLA, shared expert, first-k dense layers, multi-token prediction).

Parameter counts against the published figures; hand-derived op shapes of the new builder pieces on
tiny specs; and a finite estimate of a sensible layout on DGX H100 nodes."""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.graph.model import build_model
from simtrain.graph.spec import ModelSpec
from simtrain.graph.summary import active_param_count

NEW = ["mixtral-8x22b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama4-scout",
       "llama4-maverick", "deepseek-v3"]


def main_model_params(m) -> int:
    """Parameters outside the multi-token-prediction blocks (DeepSeek-V3's 671B excludes them)."""
    return sum(op.param_count for op in m.ops if not op.block.startswith("mtp"))


def main_model_active(m) -> int:
    """:func:`active_param_count` over the blocks outside multi-token prediction."""
    view = [op for op in m.ops if not op.block.startswith("mtp")]
    return round(sum(op.param_count * (op.moe.top_k / op.moe.experts if op.kind == "moe_experts" else 1)
                     for op in view))


@pytest.mark.parametrize("name", NEW)
def test_each_new_model_loads_and_counts_its_published_parameters(name):
    """Within 1 % of the published total, the main model for DeepSeek-V3 (671B without the MTP module).
    Llama 4 Scout is the exception, at 1.13 %: the spec is the text model (107.8B) and Meta's 109B
    counts the vision encoder and projector (~0.9B; Maverick's 400B holds the same ~0.9B, at 0.18 %)."""
    m = st.load_model(name)
    published = m.meta["published_params"]
    rel = 0.012 if name == "llama4-scout" else 0.01
    assert main_model_params(m) == pytest.approx(published, rel=rel)


def test_exact_parameter_counts_from_the_configs():
    """Hand sums from the HF config.json values (see each spec's source); Qwen3-30B-A3B's equals the
    30,532,122,624 of KerasHub's preset metadata (qwen3_moe_30b_a3b_en)."""
    exact = {
        "mixtral-8x22b": 140_630_071_296,     # 56·(88,080,384 attn + 8·301,989,888 + 49,152 + 12,288) + 2·32768·6144 + 6144
        "qwen3-8b": 8_190_735_360,            # 36·192,946,432 (6.95B non-embedding) + 2·151936·4096 + 4096
        "qwen3-32b": 32_762_123_264,
        "qwen3-30b-a3b": 30_532_122_624,
        "qwen3-235b-a22b": 235_093_634_560,
        "llama4-scout": 107_769_861_120,      # 48·2,202,101,760 + 2·202048·5120 + 5120
        "llama4-maverick": 400_711_848_960,   # 24·(314,583,040 dense + 16,295,536,640 MoE) + embeddings
        "deepseek-v3": 682_636_472_320,       # 671,026,404,352 main model + 11,610,067,968 MTP
    }
    assert {n: st.load_model(n).param_count for n in exact} == exact
    ds = st.load_model("deepseek-v3")
    # 3·583,483,392 dense + 58·11,507,286,016 MoE + 2·129280·7168 + 7168
    assert main_model_params(ds) == 3 * 583_483_392 + 58 * 11_507_286_016 + 2 * 129280 * 7168 + 7168
    # HF's 685B: the MTP layer also stores its own copies of the embedding and the head (2·926,679,040)
    assert (ds.param_count + 2 * 129280 * 7168) / 1e9 == pytest.approx(685, rel=0.001)


@pytest.mark.parametrize("name, active", [
    ("mixtral-8x22b", 39e9), ("qwen3-30b-a3b", 3.3e9), ("qwen3-235b-a22b", 22e9), ("llama4-scout", 17e9),
    ("llama4-maverick", 17e9), ("deepseek-v3", 37e9)])
def test_active_parameters(name, active):
    """Parameters per token (routed experts × top_k / experts; shared experts, attention, router and
    embeddings whole). The published active counts have two significant figures (17B is 16.5–17.5B):
    mixtral-8x22b 39.16B (+0.4 %), qwen3-235b-a22b 22.19B (+0.9 %), qwen3-30b-a3b 3.35B (+1.6 %),
    llama4-scout 17.17B (+1.0 %), llama4-maverick 17.18B (+1.1 %), deepseek-v3 37.55B (+1.5 %) without
    its MTP module; so the tolerance is 2 %, and 1 % where the count is that close."""
    m = st.load_model(name)
    rel = 0.01 if name in ("mixtral-8x22b", "qwen3-235b-a22b") else 0.02
    assert main_model_active(m) == pytest.approx(active, rel=rel)
    if name != "deepseek-v3":
        assert active_param_count(m) == main_model_active(m)


def test_layer_kinds_follow_first_dense_and_every():
    """DeepSeek-V3: layers 0–2 dense (first_k_dense_replace 3), 3–60 MoE, MTP layer MoE; Llama 4
    Maverick: MoE on 1, 3, …, 47 (interleave_moe_layer_step 2); Qwen3 MoE: every layer."""
    def moe_layers(m):
        return [b for b in m.blocks if any(op.kind == "moe_experts" for op in m.block_ops(b))]
    ds = st.load_model("deepseek-v3")
    assert moe_layers(ds) == [f"layers.{i}" for i in range(3, 61)] + ["mtp1"]
    assert ds.blocks[-2:] == ("head", "mtp1")
    mav = st.load_model("llama4-maverick")
    assert moe_layers(mav) == [f"layers.{i}" for i in range(1, 48, 2)]
    dense = {op.name.split("/", 1)[1]: op for op in mav.block_ops("layers.0")}
    assert dense["mlp/fc1"].gemm.n == 2 * 16384 and "mlp/shared_fc1" not in dense
    assert len(moe_layers(st.load_model("qwen3-30b-a3b"))) == 48


# --- tiny specs: hand-derived op shapes --------------------------------------------------------------

S, H, A, V = 8, 32, 4, 64


def tiny(**t) -> ModelSpec:
    base = {"layers": 3, "hidden": H, "heads": A, "vocab": V, "activation": "swiglu", "norm": "rmsnorm",
            "position": "rotary", "tied_embeddings": False, "biases": False, "flash_attention": True}
    return ModelSpec.model_validate({"name": "tiny", "family": "transformer", "seq_len": S,
                                     "transformer": {**base, **t}})


def ops_of(m, block):
    return {op.name.split("/", 1)[1]: op for op in m.block_ops(block)}


MLA = {"q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 2, "v_head_dim": 4}


def test_mla_op_shapes_params_and_flops():
    """MLA (DeepSeek-V2 §2.1): h 32, a 4, q_lora 12, kv_lora 8, nope 6, rope 2, v 4, s 8."""
    ops = ops_of(build_model(tiny(mla=MLA)), "layers.0")
    assert [n for n in ops if n.startswith("attn/")] == [
        "attn/norm", "attn/q_a", "attn/q_a_norm", "attn/q_b", "attn/kv_a", "attn/kv_a_norm", "attn/kv_b",
        "attn/rope", "attn/core", "attn/proj", "attn/add"]
    g = {n: (op.gemm.m, op.gemm.k, op.gemm.n) for n, op in ops.items() if op.kind == "linear"}
    assert g["attn/q_a"] == (S, H, 12)
    assert g["attn/q_b"] == (S, 12, A * (6 + 2))            # 32 = heads × (nope + rope)
    assert g["attn/kv_a"] == (S, H, 8 + 2)                  # the latent and the shared rotary key
    assert g["attn/kv_b"] == (S, 8, A * (6 + 4))            # per-head keys (nope) and values
    assert g["attn/proj"] == (S, A * 4, H)                  # heads × v_head_dim → h
    assert ops["attn/q_a_norm"].param_count == 12 and ops["attn/kv_a_norm"].param_count == 8
    attn_params = sum(op.param_count for n, op in ops.items() if n.startswith("attn/"))
    assert attn_params == H + H * 12 + 12 + 12 * 32 + H * 10 + 8 + 8 * 40 + 16 * H   # = 2012
    core = ops["attn/core"]
    assert core.flops.fw == 2 * A * S * S * (8 + 4)         # QKᵀ at d_qk = 8, A·V at d_v = 4
    assert core.flops.agrad == 2 * core.flops.fw and core.flops.wgrad == 0
    assert core.attention.head_dim == 8 and core.attention.v_dim == 4 and core.attention.kv_heads == A
    assert core.shapes == ((S, A * 8), (S, A * 8), (S, A * 4)) and core.out_shape == (S, A * 4)
    # fused: keeps Q, K, V and O (+ fp32 log-sum-exp); the out-projection shares O
    assert core.saved.act == S * A * (8 + 8 + 4 + 4)
    assert ops["attn/proj"].saved.act == 0
    assert ops["attn/rope"].out_shape == (S, (A + 1) * 2)   # every query head's rope part + the one key
    tp = {n: ops[n].tp_split for n in ("attn/q_a", "attn/q_a_norm", "attn/q_b", "attn/kv_a", "attn/kv_b",
                                       "attn/core", "attn/proj")}
    assert tp == {"attn/q_a": "replicate", "attn/q_a_norm": "replicate", "attn/q_b": "column",
                  "attn/kv_a": "replicate", "attn/kv_b": "column", "attn/core": "heads", "attn/proj": "row"}


def test_mla_without_q_lora_and_spec_checks():
    ops = ops_of(build_model(tiny(mla={**MLA, "q_lora_rank": None})), "layers.0")
    assert "attn/q_a" not in ops and (ops["attn/q"].gemm.k, ops["attn/q"].gemm.n) == (H, A * 8)
    for bad in ({"kv_heads": 2}, {"head_dim": 8}, {"position": "learned"}, {"qk_norm": "rmsnorm"}):
        with pytest.raises(ValueError):
            tiny(mla=MLA, **bad)


def test_shared_expert_first_dense_layers_and_expert_width():
    """3 layers, first_dense 1: layer 0 dense (ffn 48), layers 1–2 MoE with 4 experts of width 10
    (top-2) and 2 shared experts = one FFN of width 2·10."""
    m = build_model(tiny(ffn_hidden=48, moe={"experts": 4, "top_k": 2, "first_dense": 1, "ffn_hidden": 10,
                                             "shared_experts": 2}))
    dense, moe = ops_of(m, "layers.0"), ops_of(m, "layers.1")
    assert "mlp/experts" not in dense and dense["mlp/fc1"].gemm.n == 2 * 48
    assert [n for n in moe if n.startswith("mlp/")] == [
        "mlp/norm", "mlp/router", "mlp/experts", "mlp/shared_fc1", "mlp/shared_act", "mlp/shared_fc2",
        "mlp/shared_add", "mlp/add"]
    ex = moe["mlp/experts"]
    assert ex.param_count == 4 * 3 * H * 10 and ex.attr("params_per_expert") == 3 * H * 10
    assert ex.flops.fw == 2 * S * 2 * H * 10 * 3              # s tokens × top-2 × 3 matrices
    assert (moe["mlp/shared_fc1"].gemm.k, moe["mlp/shared_fc1"].gemm.n) == (H, 2 * 20)
    assert (moe["mlp/shared_fc2"].gemm.k, moe["mlp/shared_fc2"].gemm.n) == (20, H)
    assert moe["mlp/shared_fc1"].tp_split == "column" and moe["mlp/shared_fc2"].tp_split == "row"
    assert moe["mlp/shared_add"].out_shape == (S, H) and ex.tp_split == "expert"
    # active: the shared expert counts whole, the routed experts 2 of 4
    routed = 2 * ex.param_count
    assert active_param_count(m) == m.param_count - routed + routed // 2
    with pytest.raises(ValueError):
        tiny(moe={"experts": 4, "top_k": 2, "first_dense": 3})


def test_qk_norm_ops():
    """Qwen3: RMSNorm over head_dim 16 (≠ h / a = 8) of Q (s·a rows) and K (s·kv rows); Llama 4's L2
    norm has no weight."""
    ops = ops_of(build_model(tiny(head_dim=16, kv_heads=2, qk_norm="rmsnorm")), "layers.0")
    q, k = ops["attn/q_norm"], ops["attn/k_norm"]
    assert q.shapes == ((S * A, 16),) and k.shapes == ((S * 2, 16),)
    assert q.param_count == k.param_count == 16 and q.tp_split == "heads"
    assert (ops["attn/qkv"].gemm.k, ops["attn/qkv"].gemm.n) == (H, (A + 2 * 2) * 16)
    assert (ops["attn/proj"].gemm.k, ops["attn/proj"].gemm.n) == (A * 16, H)
    l2 = ops_of(build_model(tiny(qk_norm="l2")), "layers.0")
    assert l2["attn/q_norm"].param_count == 0 and l2["attn/q_norm"].flops.fw == 4 * S * A * 8


def test_mtp_block():
    """One MTP module (DeepSeek-V3 §2.2): hnorm + emb (tied) + enorm + proj 2h → h + a layer + norm +
    lm_head (tied) + loss; its own parameters 3h + 2h² + one layer."""
    m = build_model(tiny(moe={"experts": 4, "top_k": 2}, mtp_modules=1))
    assert m.blocks[-2:] == ("head", "mtp1")
    ops = ops_of(m, "mtp1")
    assert list(ops)[:4] == ["hnorm", "emb", "enorm", "proj"] and list(ops)[-3:] == ["norm", "lm_head", "loss"]
    assert ops["emb"].param_count == 0 and ops["emb"].attr("tied_to") == "embed/tok"
    assert ops["lm_head"].param_count == 0 and ops["lm_head"].attr("tied_to") == "head/lm_head"
    assert (ops["proj"].gemm.k, ops["proj"].gemm.n) == (2 * H, H)
    layer = sum(op.param_count for op in m.block_ops("layers.2"))
    assert sum(op.param_count for op in ops.values()) == 3 * H + 2 * H * H + layer
    assert "mlp/experts" in ops                                   # the kind of the last layer
    # the partitioner keeps it with the head on the last stage
    from simtrain.parallel.partition import partition_blocks
    assert partition_blocks(m, 2)[-1][-2:] == ("head", "mtp1")


# --- estimates on DGX H100 ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, nodes, layout", [
    ("deepseek-v3", 32, dict(tp=1, pp=8, ep=8, zero_stage=3, seq_len=4096)),
    ("llama4-maverick", 32, dict(tp=4, pp=4, ep=8, zero_stage=1, seq_len=8192, sequence_parallel=True)),
    ("llama4-scout", 8, dict(tp=4, pp=2, ep=8, zero_stage=1, seq_len=8192, sequence_parallel=True)),
    ("qwen3-235b-a22b", 16, dict(tp=2, pp=4, ep=8, zero_stage=1, seq_len=4096, sequence_parallel=True)),
    ("qwen3-30b-a3b", 2, dict(tp=1, pp=1, ep=8, zero_stage=1, seq_len=4096)),
    ("qwen3-32b", 2, dict(tp=4, pp=2, zero_stage=1, seq_len=4096, sequence_parallel=True)),
    ("qwen3-8b", 1, dict(tp=2, pp=1, zero_stage=1, seq_len=4096, sequence_parallel=True)),
    ("mixtral-8x22b", 16, dict(tp=4, pp=4, ep=8, zero_stage=1, seq_len=4096, sequence_parallel=True)),
])
def test_estimate_is_finite_and_fits(name, nodes, layout):
    cfg = st.TrainConfig(global_batch_size=512, micro_batch_size=1, precision="bf16", optimizer="adamw",
                         recompute="full", **layout)
    r = st.estimate(st.load_model(name), st.load_cluster("dgx-h100", nodes=nodes), cfg)
    assert r.feasible, r.reasons
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0
    assert 0 < r.mfu < 1 and r.memory.fits and 0 < r.memory.total_bytes <= r.memory.capacity_bytes


def test_deepseek_v3_model_flops_follow_the_shapes():
    """Forward matmul FLOPs per token = 2 × the active matrix parameters (not the input embedding, the
    norms, or the routers, counted apart) + the MTP's LM head on the shared weight + the attention
    scores, 2·s·a·(d_qk + d_v) per token in each of 62 attention layers (61 + the MTP's)."""
    m = st.load_model("deepseek-v3")
    s = m.seq_len
    fw = sum(op.flops.fw for op in m.ops if op.op_class.value in ("matmul", "attention")) / s
    router = sum(op.flops.fw for op in m.ops if op.kind == "moe_router") / s
    active_matmul = active_param_count(m) - 129280 * 7168 - sum(
        op.param_count for op in m.ops if op.kind == "rmsnorm")
    attention = 62 * 2 * s * 128 * (192 + 128)
    mtp_head = 2 * 7168 * 129280                 # the MTP's LM head multiplies by the tied (uncounted) weight
    assert fw - router == 2 * (active_matmul - 59 * 256 * 7168) + attention + mtp_head


# --- the HF config.json of each family gives the library's graph ---------------------------------------

_QWEN3_32B = {"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
              "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "max_position_embeddings": 40960, "hidden_act": "silu", "attention_bias": False,
              "tie_word_embeddings": False}
_QWEN3_30B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
              "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
              "max_position_embeddings": 40960, "hidden_act": "silu", "attention_bias": False,
              "tie_word_embeddings": False, "num_experts": 128, "num_experts_per_tok": 8,
              "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": []}
_MAVERICK = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
             "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408},
             "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
                             "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
                             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
                             "max_position_embeddings": 1048576, "hidden_act": "silu", "num_local_experts": 128,
                             "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "use_qk_norm": True,
                             "tie_word_embeddings": False}}
_DEEPSEEK_V3 = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
                "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
                "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
                "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
                "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
                "num_nextn_predict_layers": 1, "vocab_size": 129280, "max_position_embeddings": 163840,
                "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}


@pytest.mark.parametrize("config, name", [(_QWEN3_32B, "qwen3-32b"), (_QWEN3_30B, "qwen3-30b-a3b"),
                                          (_MAVERICK, "llama4-maverick"), (_DEEPSEEK_V3, "deepseek-v3")])
def test_hf_config_builds_the_library_model(config, name):
    from simtrain.graph.model import Model
    lib = st.load_model(name)
    hf = Model.from_hf_config(config, seq_len=lib.seq_len)
    assert hf.param_count == lib.param_count
    assert [(op.name, op.flops, op.param_count, op.tp_split) for op in hf.ops] == \
        [(op.name, op.flops, op.param_count, op.tp_split) for op in lib.ops]


def test_hf_rejects_what_it_cannot_build():
    from simtrain.errors import SpecError
    from simtrain.graph.hf import hf_config_to_spec
    with pytest.raises(SpecError, match="moe_layer_freq"):
        hf_config_to_spec({**_DEEPSEEK_V3, "moe_layer_freq": 2})
    with pytest.raises(SpecError, match="mlp_only_layers"):
        hf_config_to_spec({**_QWEN3_30B, "mlp_only_layers": [0]})
    text = {**_MAVERICK["text_config"], "moe_layers": [0, 5]}
    with pytest.raises(SpecError, match="moe_layers"):
        hf_config_to_spec({**_MAVERICK, "text_config": text})
