"""Builders, the model spec, the library loader, the HF importer, the summary and the CLI, on tiny
shapes with hand-derived numbers."""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import pytest
from pydantic import ValidationError

import simtrain as st
from simtrain.cli import main
from simtrain.errors import SpecError
from simtrain.graph.hf import hf_config_to_spec
from simtrain.graph.model import Model, UnmodelledOp, build_model
from simtrain.graph.op import Saved
from simtrain.graph.spec import ModelSpec
from simtrain.graph.summary import active_param_count, model_flops, saved_bytes, summary_frame

S, H, A, V = 8, 16, 4, 32          # tiny GPT: seq, hidden, heads, vocab


def gpt_spec(**over) -> ModelSpec:
    t = {"layers": 2, "hidden": H, "heads": A, "vocab": V, "dropout": 0.1, **over.pop("t", {})}
    return ModelSpec.model_validate({"name": "tiny-gpt", "family": "transformer", "seq_len": S, "transformer": t, **over})


# --- Korthikanti et al. 2022, Table 2 ------------------------------------------------------------

def test_layer_saved_bytes_reproduce_korthikanti_table2_exactly():
    """Per layer, 16-bit activations, 1-byte masks, b = 1: s·h·(34 + 5·a·s/h) bytes.

    s h (34 + 5 a s / h) = 8·16·34 + 5·4·64 = 4352 + 1280 = 5632 bytes. By op: LN1 input 2sh, QKV input
    2sh, Q K 4sh + V 2sh, softmax out 2as², mask as², dropout out 2as², proj input 2sh, dropout mask sh,
    LN2 input 2sh, fc1 input 2sh, GeLU input 8sh, fc2 input 8sh, dropout mask sh."""
    model = build_model(gpt_spec())
    ops = model.block_ops("layers.1")
    act = sum(op.saved.act for op in ops)
    mask = sum(op.saved.mask for op in ops)
    assert act * 2 + mask == S * H * (34 + 5 * A * S / H) == 5632
    # LayerNorm's fp32 mean + rstd (Korthikanti leave them out): 2 norms × s rows × 8 B = 128 B more.
    stats = sum(op.attr("stats_bytes", 0) for op in ops)
    assert stats == 2 * S * 8
    assert sum(op.saved.bytes(2) for op in ops) == 5632 + 128


def test_layer_flops_are_megatrons():
    """Matmul FLOPs per layer forward: 24·s·h² + 4·s²·h (Narayanan et al. 2021 §5.1, per sample);
    the backward (agrad + wgrad) is twice that."""
    ops = build_model(gpt_spec()).block_ops("layers.0")
    mm = [op for op in ops if op.op_class.value in ("matmul", "attention")]
    fw = sum(op.flops.fw for op in mm)
    assert fw == 24 * S * H**2 + 4 * S**2 * H == 49152 + 4096
    assert sum(op.flops.backward for op in mm) == 2 * fw
    # element-wise work is counted on top (natural counts): LN 8·sh ×2, GeLU 5·4sh, dropout 2·sh ×2, add sh ×2
    elementwise = sum(op.flops.fw for op in ops if op not in mm)
    assert elementwise == (16 + 20 + 4 + 2) * S * H


def test_layers_are_identical_records_but_for_name_and_block():
    model = build_model(gpt_spec(t={"layers": 4}))
    strip = [[replace(op, name="", block="") for op in model.block_ops(f"layers.{i}")] for i in range(4)]
    assert strip[0] == strip[1] == strip[2] == strip[3]
    assert model.blocks == ("embed", "layers.0", "layers.1", "layers.2", "layers.3", "head")


def test_gpt_params_and_graph_edges():
    m = build_model(gpt_spec())
    # per layer 12h² + 13h; embeddings (V + s)·h; final LN 2h; tied head adds nothing.
    assert m.param_count == 2 * (12 * H**2 + 13 * H) + (V + S) * H + 2 * H
    g = m.graph
    assert nx.is_directed_acyclic_graph(g)
    assert set(g.predecessors("layers.0/attn/add")) == {"layers.0/attn/drop", "embed/drop"}
    assert set(g.predecessors("layers.1/attn/norm")) == {"layers.0/mlp/add"}
    assert m.ops[-1].name == "head/loss" and m.block_ops("head")[1].attr("tied_to") == "embed/tok"


def test_llama_style_layer_ops_and_flash_sharing():
    spec = gpt_spec(t={"kv_heads": 2, "activation": "swiglu", "norm": "rmsnorm", "position": "rotary",
                       "biases": False, "tied_embeddings": False, "flash_attention": True, "dropout": 0.0})
    m = build_model(spec)
    names = [op.name.split("/", 1)[1] for op in m.block_ops("layers.0")]
    assert names == ["attn/norm", "attn/qkv", "attn/rope", "attn/core", "attn/proj", "attn/add", "mlp/norm",
                     "mlp/fc1", "mlp/act", "mlp/fc2", "mlp/add"]
    ops = {op.name.split("/", 1)[1]: op for op in m.block_ops("layers.0")}
    d = H // A
    assert ops["attn/qkv"].out_shape == (S, (A + 2 * 2) * d)
    assert ops["attn/proj"].saved == Saved(act=0) and ops["attn/proj"].attr("input_saved_by") == "attn/core"
    assert ops["mlp/fc1"].out_shape == (S, 2 * 4 * H)          # gate and up in one matmul
    tp = {k: op.tp_split for k, op in ops.items()}
    assert tp == {"attn/norm": "sequence", "attn/qkv": "column", "attn/rope": "heads", "attn/core": "heads",
                  "attn/proj": "row", "attn/add": "sequence", "mlp/norm": "sequence", "mlp/fc1": "column",
                  "mlp/act": "column", "mlp/fc2": "row", "mlp/add": "sequence"}
    # untied: LM head has V·h parameters of its own
    assert m.block_ops("head")[1].param_count == V * H


def test_squared_relu_mlp_is_one_matrix_wide_and_keeps_its_input():
    """Nemotron's MLP: fc1 h → f (no gate), relu² on f keeping its input (fc1's output), fc2 keeping its own
    input (relu²'s output): 2f elements a token, like GeLU's."""
    spec = gpt_spec(t={"activation": "relu2", "biases": False, "dropout": 0.0})
    ops = {op.name.split("/", 1)[1]: op for op in build_model(spec).block_ops("layers.0")}
    assert ops["mlp/fc1"].out_shape == (S, 4 * H) and ops["mlp/act"].kind == "relu2"
    assert ops["mlp/act"].attr("saved_input_elements") == S * 4 * H
    assert ops["mlp/fc2"].attr("input_saved_by") is None


def test_post_ln_bert_and_parallel_residual_orders():
    bert = build_model(gpt_spec(t={"norm_position": "post", "causal": False, "token_types": 2, "head": "mlm"}))
    names = [op.name.split("/", 1)[1] for op in bert.block_ops("layers.0")]
    assert names[:6] == ["attn/qkv", "attn/core", "attn/proj", "attn/drop", "attn/add", "attn/norm"]
    assert [op.name for op in bert.block_ops("embed")][-2:] == ["embed/norm", "embed/drop"]
    assert [op.name for op in bert.block_ops("head")] == ["head/transform", "head/act", "head/norm", "head/decoder",
                                                         "head/loss"]
    assert bert.block_ops("head")[3].param_count == V          # tied decoder keeps its own bias
    neox = build_model(gpt_spec(t={"parallel_residual": True, "dropout": 0.0}))
    g = neox.graph
    assert set(g.predecessors("layers.0/attn/add")) == {"layers.0/attn/proj", "layers.0/mlp/fc2"}
    assert set(g.successors("embed/pos_add")) == {"layers.0/attn/norm", "layers.0/mlp/norm", "layers.0/mlp/add"}


def test_moe_every_other_layer_and_active_params():
    spec = gpt_spec(t={"layers": 4, "activation": "swiglu", "ffn_hidden": 8, "biases": False,
                       "moe": {"experts": 4, "top_k": 2, "every": 2}})
    m = build_model(spec)
    kinds = [[op.kind for op in m.block_ops(f"layers.{i}")] for i in range(4)]
    assert "moe_experts" not in kinds[0] and "moe_experts" in kinds[1] and "moe_experts" in kinds[3]
    expert_params = 4 * 3 * H * 8                              # 4 experts × 3 matrices h × f
    experts = [op for op in m.ops if op.kind == "moe_experts"]
    assert [op.param_count for op in experts] == [expert_params, expert_params]
    assert active_param_count(m) == m.param_count - 2 * expert_params // 2
    assert m.layout_facts()["experts"] == 4


def test_vit_and_cnn_blocks():
    vit = st.load_model("vit-b16")
    assert vit.blocks[0] == "embed" and vit.blocks[-1] == "head" and len(vit.blocks) == 14
    core = next(op for op in vit.ops if op.kind == "attention")
    assert (core.attention.seq_q, core.attention.causal) == (197, False)
    r18 = st.load_model("resnet18")
    assert r18.blocks == ("stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1",
                          "layer4.0", "layer4.1", "head")
    stem = {op.name: op for op in r18.block_ops("stem")}
    # conv keeps the image (3·224²); BN its input (64·112²); the in-place ReLU its output; the max-pool
    # shares that storage and adds int64 indices 64·56²·8 B.
    assert stem["stem/conv"].saved == Saved(act=3 * 224 * 224)
    assert stem["stem/relu"].saved == Saved(act=64 * 112 * 112)
    assert stem["stem/pool"].saved == Saved(act=0, fixed_bytes=64 * 56 * 56 * 8)
    assert stem["stem/conv"].flops.agrad == 0                  # the image needs no gradient
    down = {op.name: op for op in r18.block_ops("layer2.0")}
    assert down["layer2.0/conv_down"].attr("input_saved_by") == "layer1.1/relu"


def test_mlp_builder():
    m = st.load_model("mlp-mnist")
    assert m.param_count == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    first = m.ops[0]
    assert first.flops.agrad == 0 and first.flops.fw == 2 * 784 * 512
    # later fc inputs are the ReLU outputs, kept once (by the ReLU)
    assert m.block_ops("layers.1")[0].saved == Saved(act=0)


# --- spec validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("body, field_part", [
    ({"family": "cnn", "transformer": {"layers": 1, "hidden": 4, "heads": 2, "vocab": 4}}, "'transformer' does not belong to family 'cnn'"),
    ({"family": "vit", "vit": {"patch_size": 16, "image_size": 224}}, "needs a 'transformer'"),
    ({"family": "transformer", "seq_len": 4, "transformer": {"layers": 1, "hidden": 8, "heads": 4, "kv_heads": 3,
                                                             "vocab": 4}}, "multiple of kv_heads"),
    ({"family": "mlp", "seq_len": 4, "mlp": {"widths": [4, 2]}}, "seq_len is not a field"),
    ({"family": "transformer", "seq_len": 16, "transformer": {"layers": 1, "hidden": 8, "heads": 2, "vocab": 4,
                                                              "max_positions": 8}}, "exceeds the learned position"),
    ({"family": "cnn", "cnn": {"arch": "resnet", "depth": 20}}, "not a resnet depth"),
])
def test_spec_rejects_bad_models(body, field_part):
    with pytest.raises(ValidationError, match=field_part):
        ModelSpec.model_validate({"name": "bad", **body})


def test_model_yaml_errors_name_file_and_field(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("spec: model\nname: b\nfamily: transformer\nseq_len: 4\n"
                    "transformer: {layers: 1, hidden: 8, heads: 2, vocab: 4, colour: red}\n")
    with pytest.raises(SpecError) as err:
        st.load_model(str(path))
    assert err.value.fields == ["transformer.colour"] and err.value.issues[0].file == str(path)


def test_load_model_caches_and_rebuilds_at_seq_len():
    a, b = st.load_model("gpt2"), st.load_model("gpt2")
    assert a is b
    short = a.with_seq_len(128)
    assert short.seq_len == 128 and short is st.load_model("gpt2", seq_len=128)
    assert short.param_count == a.param_count                  # learned table stays 1024 rows
    assert short.with_seq_len(1024) is a is build_model(a.arch)
    with pytest.raises(SpecError):
        st.load_model("resnet18", seq_len=128)
    with pytest.raises(SpecError, match="exceeds the learned position table"):
        st.load_model("gpt2", seq_len=4096)
    with pytest.raises(SpecError, match="no model named"):
        st.load_model("gpt-99")


# --- Hugging Face configs ----------------------------------------------------------------------------

def test_hf_aliases_nesting_and_errors():
    gpt2_like = {"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 4, "n_positions": 8, "vocab_size": 32,
                 "activation_function": "gelu_new"}
    spec = hf_config_to_spec(gpt2_like)
    assert (spec.transformer.hidden, spec.transformer.activation, spec.seq_len) == (16, "gelu_tanh", 8)
    nested = {"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 1,
                                                     "num_attention_heads": 4, "intermediate_size": 32,
                                                     "vocab_size": 32, "max_position_embeddings": 8}}
    assert hf_config_to_spec(nested).transformer.activation == "swiglu"
    with pytest.raises(SpecError) as err:
        hf_config_to_spec({"model_type": "perceiver"})
    assert err.value.fields == ["model_type"]
    with pytest.raises(SpecError) as err:
        hf_config_to_spec({"model_type": "llama", "hidden_size": 16})
    assert err.value.fields == ["num_hidden_layers"]


def test_hf_qwen2_has_qkv_biases_only():
    cfg = {"model_type": "qwen2", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 32, "vocab_size": 32, "max_position_embeddings": 8}
    m = Model.from_hf_config(cfg)
    ops = {op.name: op for op in m.ops}
    # qkv: 16 × (4 + 2·2)·4 = 512 weights + 32 biases; o_proj 256, no bias
    assert ops["layers.0/attn/qkv"].param_count == 16 * 32 + 32
    assert ops["layers.0/attn/proj"].param_count == 256


# --- summary and CLI -----------------------------------------------------------------------------

def test_summary_frame_totals_and_unmodelled():
    m = build_model(gpt_spec())
    df = m.summary()
    total = df[df.name == "TOTAL"].iloc[0]
    assert len(df) == len(m.ops) + 1
    assert total.params == m.param_count and total.fw_flops == model_flops(m).fw
    assert total.saved_bytes == saved_bytes(m)
    imported = Model("imp", list(m.ops), unmodelled=(UnmodelledOp("aten.weird", 3, "fw"),))
    last = summary_frame(imported).iloc[-1]
    assert last["name"] == "UNMODELLED" and "aten.weird×3" in last["kind"]


def test_cli_model_show_and_list(capsys):
    assert main(["model", "show", "gpt2", "--seq-len", "64", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "124,439,808" in out and "layers.11/mlp/fc2" in out and "per token" in out
    assert main(["model", "list"]) == 0
    assert "llama3-405b" in capsys.readouterr().out
    assert main(["model", "show", "no-such-model"]) == 2
    assert "no model named" in capsys.readouterr().err


@pytest.mark.parametrize("impl, fused", [(None, True), ("sdpa", True), ("flash_attention_2", True), ("eager", False)])
def test_hf_attn_implementation_chooses_the_attention_kernel(impl, fused):
    import json
    from pathlib import Path
    cfg = json.loads((Path(__file__).parents[1] / "data" / "hf" / "gpt2.json").read_text())
    if impl is not None:
        cfg["attn_implementation"] = impl
    m = Model.from_hf_config(cfg)
    att = [op.attention for op in m.ops if op.attention is not None]
    assert att and all(a.fused is fused for a in att)


def test_hf_unknown_attn_implementation_is_an_error():
    cfg = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
           "intermediate_size": 32, "vocab_size": 32, "attn_implementation": "magic"}
    with pytest.raises(SpecError, match="attn_implementation"):
        Model.from_hf_config(cfg)
