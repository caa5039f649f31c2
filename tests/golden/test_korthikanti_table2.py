"""Korthikanti et al. 2022 Table 2: activation memory per transformer layer, through simtrain's
memory accounting (cost/memory.py + the tp/sp shard factors), for the materialised-attention GPT layer
at 16-bit activations with 1-byte dropout masks. LayerNorm's fp32 mean/rstd (2·s·b·4 B per norm,
not in the paper's count) are subtracted and checked separately."""

import pytest

from simtrain.cost.memory import activation_bytes_per_microbatch, checkpoint_bytes
from simtrain.cost.precision import regime
from simtrain.graph.builders.transformer import build_transformer
from simtrain.graph.spec import ModelSpec

S, B, H, A = 64, 2, 32, 4  # tiny shapes: seq, micro-batch, hidden, heads


@pytest.fixture(scope="module")
def layer():
    spec = ModelSpec.model_validate({
        "name": "tiny-gpt", "family": "transformer", "seq_len": S,
        "transformer": {"layers": 2, "hidden": H, "heads": A, "vocab": 128, "max_positions": S,
                        "activation": "gelu", "norm": "layernorm", "position": "learned",
                        "tied_embeddings": True, "biases": True, "causal": True, "dropout": 0.1,
                        "flash_attention": False, "head": "lm"}})
    model = build_transformer(spec)
    return tuple(op for op in model.ops if op.block == "layers.0")


def _stats(ops, tp, sp):
    # LayerNorm statistics: fp32 mean + rstd per row; sharded along the sequence under SP
    return sum(op.saved.fixed_bytes for op in ops if op.kind == "layernorm") * B / (tp if sp else 1)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_no_recompute(layer, t):
    reg = regime("bf16")
    sbh = S * B * H
    got = activation_bytes_per_microbatch(layer, B, reg, "none", t, False, 1) - _stats(layer, t, False)
    assert got == pytest.approx(sbh * (10 + 24 / t + 5 * A * S / (H * t)))  # Table 2, "tensor parallel"


@pytest.mark.parametrize("t", [1, 2, 4])
def test_sequence_parallel(layer, t):
    got = activation_bytes_per_microbatch(layer, B, regime("bf16"), "none", t, True, 1) - _stats(layer, t, True)
    assert got == pytest.approx(S * B * H / t * (34 + 5 * A * S / H))  # "tensor + sequence parallel"


@pytest.mark.parametrize("t", [1, 2, 4])
def test_selective_recompute(layer, t):
    reg = regime("bf16")
    tp_only = activation_bytes_per_microbatch(layer, B, reg, "selective", t, False, 1) - _stats(layer, t, False)
    assert tp_only == pytest.approx(S * B * H * (10 + 24 / t))  # "tensor parallel + selective"
    both = activation_bytes_per_microbatch(layer, B, reg, "selective", t, True, 1) - _stats(layer, t, True)
    assert both == pytest.approx(34 * S * B * H / t)  # "tensor + sequence parallel + selective"


def test_full_recompute_keeps_the_layer_input(layer):
    # Table 2, "full activation recomputation": 2·s·b·h per layer
    assert checkpoint_bytes([layer[0]], B, regime("bf16"), 1, False) == 2 * S * B * H


def test_layernorm_stats_are_the_only_extra(layer):
    norms = [op for op in layer if op.kind == "layernorm"]
    assert len(norms) == 2
    assert all(op.saved.fixed_bytes == 2 * S * 4 for op in norms)  # mean + rstd, fp32, per token
