"""Uneven pipeline stages as Megatron cuts them (--decoder-first/last-pipeline-num-layers)."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.parallel.partition import partition_blocks
from simtrain.specs.train import layout_problems


def test_pinned_ends_by_hand():
    """gpt2: 12 layers over 4 stages with 2 on the first and 2 on the last: 4 + 4 between; the
    embedding joins the first stage and the head the last."""
    model = st.load_model("gpt2")
    chunks = partition_blocks(model, 4, 2, 2)
    layers = [[b for b in c if b.startswith("layers.")] for c in chunks]
    assert [len(c) for c in layers] == [2, 4, 4, 2]
    assert chunks[0][0] == model.blocks[0] and chunks[-1][-1] == model.blocks[-1]
    assert [b for c in chunks for b in c] == list(model.blocks)
    only_first = partition_blocks(model, 4, 0, None)
    assert [sum(b.startswith("layers.") for b in c) for c in only_first] == [0, 4, 4, 4]


def _cfg(**kw):
    base = dict(global_batch_size=16, micro_batch_size=1, seq_len=1024, precision="bf16", pp=4)
    return st.TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("kw, words", [
    (dict(first_stage_layers=3), "leave 9 of the model's 12 layers for 3"),  # 9 over 3 divides: no error
    (dict(first_stage_layers=2, last_stage_layers=3), "must split evenly"),
    (dict(first_stage_layers=2, pp=1), "need pp ≥ 2"),
    (dict(first_stage_layers=2, virtual_stages=2, pipeline_schedule="interleaved-1f1b"), "non-interleaved"),
])
def test_layouts_that_cannot_be_cut_say_why(kw, words):
    problems = layout_problems(_cfg(**kw), 4, st.load_model("gpt2"))
    if "leave 9" in words:
        assert not [p for p in problems if "first_stage_layers" in p]
    else:
        assert any(words in p for p in problems), problems


def test_fewer_layers_on_the_first_stage_lower_its_memory_and_the_estimate_runs():
    cluster = st.load_cluster("dgx-a100-80gb", nodes=1)
    even = st.estimate("gpt2", cluster, _cfg())
    light = st.estimate("gpt2", cluster, _cfg(first_stage_layers=0))
    assert light.feasible and even.feasible
    assert light.layout["pp"] == 4
    from simtrain.estimator import build_program, prepare_model
    cfg = _cfg(first_stage_layers=0)
    prog = build_program(prepare_model(st.load_model("gpt2"), cfg), cluster, cfg)
    assert sum(b.startswith("layers.") for b in prog.stages[0].blocks) == 0
    assert prog.stages[1].fw_s > prog.stages[0].fw_s


def test_fused_swiglu_keeps_31_78_bytes_per_token_per_hidden_for_a_llama_layer():
    """Llama 3 405B layer (h 16384, ffn 53248 = 3.25 h, 128 heads, 8 KV heads), bf16, tp 1, per token per
    hidden unit: norms' inputs 2 + 2, QKV input 2, flash attention's Q 2, K and V 2·2·8/128 = 0.25, O 2
    and its fp32 statistics 128·4/16384 = 0.03125, fc1's input 2, fc2's input 2·3.25 = 6.5; the SwiGLU
    eager keeps gate, up and silu(gate), 3·2·3.25 = 19.5 (38.28 in all, the issue's 38.25 + statistics),
    fused only gate and up, 13 (31.78: Transformer Engine's ~31.75)."""
    from simtrain.cost.op_cost import saved_bytes
    from simtrain.cost.precision import regime
    from simtrain.estimator import prepare_model
    from simtrain.specs.stack_resolve import resolve_stack
    model, per = st.load_model("llama3-405b"), 8192 * 16384
    out = {}
    for stack in ("fsdp2", "megatron-core"):
        cfg = resolve_stack(st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=8192, precision="bf16",
                                           stack=stack))
        ops = [o for o in prepare_model(model, cfg).ops if o.block == "layers.0"]
        out[stack] = sum(saved_bytes(o, 1, regime("bf16")) for o in ops) / per
    assert out["fsdp2"] == pytest.approx(38.28125, rel=1e-4) and out["megatron-core"] == pytest.approx(31.78125, rel=1e-4)
    assert out["fsdp2"] - out["megatron-core"] == pytest.approx(6.5)  # silu(gate): 2 bytes x 3.25 h


def test_early_stop_recompute_skips_the_block_tail():
    """PyTorch's non-reentrant checkpoint stops once the backward's tensors are rebuilt: in a Llama block
    the last tensor unpacked is fc2's input (SwiGLU's output), so fc2 and the residual add after it are
    never recomputed; with tp = 2 the recomputation's row-parallel all-reduces halve (proj stays)."""
    from simtrain.estimator import build_program, prepare_model
    from simtrain.parallel.recompute import early_stop_tail
    from simtrain.specs.stack_resolve import resolve_stack
    model = st.load_model("llama2-7b")
    assert {n for n in early_stop_tail(model) if n.startswith("layers.0/")} == {"layers.0/mlp/fc2", "layers.0/mlp/add"}
    mpt = st.load_model("mpt-7b")  # GELU MLP: fc2's input (gelu's output) is the last tensor unpacked too
    assert {n for n in early_stop_tail(mpt) if n.startswith("layers.0/")} == {"layers.0/mlp/fc2", "layers.0/mlp/add"}
    cluster = st.load_cluster("dgx-a100-80gb", nodes=1)
    out = {}
    for early in (False, True):
        stack = st.load_stack("reference").with_overrides(recompute_early_stop=early)
        cfg = resolve_stack(st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=1024, precision="bf16",
                                           tp=2, recompute="full", stack=stack), cluster.device)
        m = prepare_model(model, cfg)
        stage = build_program(m, cluster, cfg).stages[0]
        rec = [t for t in stage.comm if t.axis == "tp" and t.phase == "recompute"]
        out[early] = (stage.recompute_s, rec[0].count if rec else 0, dict((n, t) for n, _, t, _ in stage.op_times))
    (full_s, full_n, times), (early_s, early_n, _) = out[False], out[True]
    assert early_n * 2 == full_n  # proj and fc2 per layer → proj alone
    fc2_fw = times["layers.*/mlp/fc2"]  # fw + bw + recompute of fc2 over the layers, per micro-batch
    assert 0 < full_s - early_s < fc2_fw
