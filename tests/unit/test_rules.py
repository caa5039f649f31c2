"""Every op rule on a tiny shape, against a whole Op record derived by hand (derivations inline)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.errors import MissingRuleError, SpecError
from simtrain.glossary import OpClass
from simtrain.graph.op import AttentionInfo, Gemm, MoEInfo, Op, PhaseCounts, Saved
from simtrain.graph.rules import attention_flops, causal_fraction, conv_out_size, make_op, registered_kinds

P = PhaseCounts


def rec(kind: str, op_class: OpClass, **fields) -> Op:
    """The expected record, named like the one under test (``t/x`` in block ``t``)."""
    return Op(name="t/x", kind=kind, op_class=op_class, block="t", **fields)


def build(kind: str, **params) -> Op:
    return make_op(kind, "t/x", "t", **params)


# --- dense ---------------------------------------------------------------------------------------

def test_linear_whole_record():
    # X[2, 4] · W[4, 3] + b[3]: fw 2·m·k·n = 2·2·4·3 = 48; agrad dX = dY·Wᵀ 48; wgrad dW = Xᵀ·dY 48.
    # bytes (elements): fw reads X (8) writes Y (6); agrad reads dY (6) writes dX (8); wgrad reads dY + X (14).
    # weights: 12 + 3 bias = 15 read fw; W (12) read agrad; 15 read (accumulator) and written wgrad.
    expected = rec("linear", OpClass.MATMUL, flops=P(48, 48, 48), act_read=P(8, 6, 14), act_write=P(6, 8, 0),
                   weight_read=P(15, 12, 15), weight_write=P(0, 0, 15), param_count=15, saved=Saved(act=8),
                   shapes=((2, 4),), out_shape=(2, 3), gemm=Gemm(2, 3, 4), tp_split="column",
                   attrs=(("bias", True), ("input_grad", True), ("saved_input_elements", 8)))
    assert build("linear", rows=2, in_features=4, out_features=3, tp_split="column") == expected


def test_linear_without_input_grad_tied_no_bias():
    # the data needs no gradient: no agrad FLOPs or bytes; a tied weight is counted by its owner.
    op = build("linear", rows=2, in_features=4, out_features=3, bias=False, input_grad=False, tied_to="e/tok")
    expected = rec("linear", OpClass.MATMUL, flops=P(48, 0, 48), act_read=P(8, 0, 14), act_write=P(6, 0, 0),
                   weight_read=P(12, 0, 12), weight_write=P(0, 0, 12), param_count=0, saved=Saved(act=8),
                   shapes=((2, 4),), out_shape=(2, 3), gemm=Gemm(2, 3, 4),
                   attrs=(("bias", False), ("input_grad", False), ("saved_input_elements", 8), ("tied_to", "e/tok")))
    assert op == expected


@pytest.mark.parametrize("kind", ["matmul", "bmm"])
def test_matmul_bmm(kind):
    # C[2, 3, 5] = A[2, 3, 4] · B[2, 4, 5]: fw 2·2·3·4·5 = 240; agrad dA and dB 240 each = 480.
    # reads fw A 24 + B 40; agrad dC twice (60) + A + B (64) = 124; writes C 30, dA + dB 64.
    expected = Op(name="t/x", kind=kind, op_class=OpClass.MATMUL, block="t", flops=P(240, 480, 0),
                  act_read=P(64, 124, 0), act_write=P(30, 64, 0), saved=Saved(act=64),
                  shapes=((2, 3, 4), (2, 4, 5)), out_shape=(2, 3, 5), gemm=Gemm(3, 5, 4, 2))
    assert make_op(kind, "t/x", "t", m=3, k=4, n=5, batch=2) == expected


# --- convolution and pooling ---------------------------------------------------------------------

def test_conv2d_strided_padded():
    # 2 → 4 channels, 3×3, stride 2, pad 1 on 5×5: out ⌊(5 + 2 − 2 − 1)/2⌋ + 1 = 3 → 3×3 = 9 positions.
    # K = 2·9 = 18 taps per output; fw = 2·9·4·18 = 1296 (agrad, wgrad the same).
    # elements: input 2·25 = 50, output 4·9 = 36; weights 4·18 = 72 + 4 bias = 76.
    expected = rec("conv2d", OpClass.CONV, flops=P(1296, 1296, 1296), act_read=P(50, 36, 86),
                   act_write=P(36, 50, 0), weight_read=P(76, 72, 76), weight_write=P(0, 0, 76), param_count=76,
                   saved=Saved(act=50), shapes=((2, 5, 5),), out_shape=(4, 3, 3), gemm=Gemm(9, 4, 18, 1),
                   attrs=(("bias", True), ("dilation", (1, 1)), ("groups", 1), ("input_grad", True),
                          ("kernel", (3, 3)), ("padding", (1, 1)), ("saved_input_elements", 50), ("stride", (2, 2))))
    assert build("conv2d", in_channels=2, out_channels=4, kernel_size=3, stride=2, padding=1,
                 input_size=(5, 5)) == expected


def test_depthwise_conv2d_groups():
    # depthwise: 4 channels, groups 4, 3×3, pad 1 on 4×4 → 4×4 out; K = (4/4)·9 = 9.
    # fw = 2·16·4·9 = 1152; weights 4·9 = 36, no bias; GEMM batch = groups, n = 4/4 = 1.
    op = build("conv2d", in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=4, input_size=(4, 4),
               bias=False)
    assert (op.flops, op.param_count, op.gemm, op.out_shape) == (P(1152, 1152, 1152), 36, Gemm(16, 1, 9, 4), (4, 4, 4))


def test_conv1d_dilated():
    # 3 → 2 channels, k 3, dilation 2 on length 10: out (10 − 2·2 − 1)/1 + 1 = 6; K = 9;
    # fw 2·6·2·9 = 216; no input gradient (first layer).
    op = build("conv1d", in_channels=3, out_channels=2, kernel_size=3, dilation=2, input_size=(10,), input_grad=False)
    assert (op.flops, op.out_shape, op.act_write, op.param_count) == (P(216, 0, 216), (2, 6), P(12, 0, 0), 20)


def test_maxpool_keeps_input_and_int64_indices():
    # 2 channels, 4×4, k 2 stride 2 → 2×2: 8 outputs × 4 compares = 32; indices 8 × 8 B = 64 B.
    expected = rec("maxpool2d", OpClass.REDUCTION, flops=P(32, 32, 0), act_read=P(32, 8, 0), act_write=P(8, 32, 0),
                   fixed_write_bytes=P(64, 0, 0), fixed_read_bytes=P(0, 64, 0), saved=Saved(act=32, fixed_bytes=64),
                   shapes=((2, 4, 4),), out_shape=(2, 2, 2),
                   attrs=(("index_bytes", 64), ("kernel", (2, 2)), ("padding", (0, 0)), ("saved_input_elements", 32),
                          ("stride", (2, 2)), ("window", 4)))
    assert build("maxpool2d", channels=2, input_size=(4, 4), kernel_size=2) == expected


def test_avg_adaptive_global_pools():
    avg = build("avgpool2d", channels=2, input_size=(4, 4), kernel_size=2)
    assert (avg.flops, avg.saved) == (P(32, 32, 0), Saved(act=32))
    # adaptive to 2×2 = windows of 4; keeps the input; to 1×1 it is a mean and keeps nothing.
    ada = build("adaptive_avgpool2d", channels=2, input_size=(4, 4), output_size=(2, 2))
    assert (ada.flops, ada.saved) == (P(32, 32, 0), Saved(act=32))
    assert build("adaptive_avgpool2d", channels=2, input_size=(4, 4), output_size=(1, 1)).saved == Saved()
    gap = build("global_avgpool", channels=3, input_size=(2, 2))
    assert (gap.flops, gap.out_shape, gap.saved) == (P(12, 12, 0), (3, 1, 1), Saved())


# --- attention -----------------------------------------------------------------------------------

def test_attention_materialised_with_dropout():
    # a = 2 heads, d = 4, s = 3: Q, K, V, O are 3·8 = 24 elements each; scores a·s² = 18.
    # fw 4·a·s²·d = 4·2·9·4 = 288; agrad 2× = 576.
    # fw reads Q + K + V (72) + P three times (softmax, dropout, AV: 54) = 126; writes S, Y, Yd (54) + O (24) = 78.
    # agrad reads dO ×2 (48) + V, K, Q (72) + scores × 6 (108) = 228; writes dV, dK, dQ (72) + 3 × 18 = 126.
    # saved: Q, K, V (72) + softmax out + dropout out (36) = 108 act; mask 18 (1 byte each).
    expected = rec("attention", OpClass.ATTENTION, flops=P(288, 576, 0), act_read=P(126, 228, 0),
                   act_write=P(78, 126, 0), fixed_write_bytes=P(18, 0, 0), fixed_read_bytes=P(0, 18, 0),
                   saved=Saved(act=108, mask=18), shapes=((3, 8), (3, 8), (3, 8)), out_shape=(3, 8),
                   gemm=Gemm(3, 3, 4, 2), tp_split="heads",
                   attention=AttentionInfo(heads=2, kv_heads=2, head_dim=4, seq_q=3, seq_kv=3, causal=True, fused=False),
                   attrs=(("dropout", 0.1), ("random_draws", 18),  # a draw per score: 2 heads x 3 x 3
                          ("saved_scores_act", 36), ("saved_scores_mask", 18)))
    assert build("attention", heads=2, head_dim=4, seq=3, dropout=0.1) == expected


def test_attention_without_dropout_saves_softmax_once():
    op = build("attention", heads=2, head_dim=4, seq=3)
    # Q, K, V 72 + softmax output 18 (AV reuses it): 90; no mask.
    assert op.saved == Saved(act=90, mask=0)
    assert (op.act_read.fw, op.act_write.fw) == (72 + 36, 36 + 24)


def test_attention_fused_gqa():
    # 4 query heads, 2 KV heads, d = 2, s = 3: Q, O 3·8 = 24; K, V 3·4 = 12 each.
    # FLOPs do not depend on kv heads: 4·4·9·2 = 288. Saved Q, K, V, O = 72 + fp32 lse 4·3·4 = 48 B.
    op = build("attention", heads=4, kv_heads=2, head_dim=2, seq=3, fused=True, causal=False)
    expected = rec("attention", OpClass.ATTENTION, flops=P(288, 576, 0), act_read=P(48, 96, 0), act_write=P(24, 48, 0),
                   fixed_write_bytes=P(48, 0, 0), fixed_read_bytes=P(0, 48, 0), saved=Saved(act=72, fixed_bytes=48),
                   shapes=((3, 8), (3, 4), (3, 4)), out_shape=(3, 8), gemm=Gemm(3, 3, 2, 4), tp_split="heads",
                   attention=AttentionInfo(4, 2, 2, 3, 3, causal=False, fused=True),
                   attrs=(("dropout", 0.0), ("saved_scores_act", 0), ("saved_scores_mask", 0)))
    assert op == expected


def test_attention_flops_conventions():
    op = build("attention", heads=2, head_dim=4, seq=4, causal=True)
    # full square: 4·2·16·4 = 512 fw; causal keeps (s + 1)/(2s) = 5/8 of it: 320.
    assert attention_flops(op) == P(512, 1024, 0) == attention_flops(op, "full")
    assert attention_flops(op, "causal") == P(320, 640, 0)
    bidir = build("attention", heads=2, head_dim=4, seq=4, causal=False)
    assert attention_flops(bidir, "causal") == bidir.flops
    with pytest.raises(ValueError):
        attention_flops(op, "half")


@given(st.integers(1, 50), st.integers(0, 50))
def test_causal_fraction_matches_brute_force(sq, extra):
    sk = sq + extra
    kept = sum(min(sk, sk - sq + i + 1) for i in range(sq))
    assert causal_fraction(sq, sk) == pytest.approx(kept / (sq * sk))


def test_rotary():
    # s 3, 2 query + 1 kv heads of 4 dims, all rotated: n = 3·3·4 = 36; 3 FLOPs each way; nothing saved.
    expected = rec("rotary", OpClass.ELEMENTWISE, flops=P(108, 108, 0), act_read=P(36, 36, 0), act_write=P(36, 36, 0),
                   saved=Saved(), shapes=((3, 12),), out_shape=(3, 12), tp_split="heads",
                   attrs=(("rotary_dim", 4), ("table_elements_per_batch", 24)))
    assert build("rotary", seq=3, heads=2, kv_heads=1, head_dim=4) == expected


# --- norms ---------------------------------------------------------------------------------------

def test_layernorm_whole_record():
    # 3 rows × 4: n = 12; FLOPs 8/10/3 per element = 96/120/36; weights γ, β = 8.
    # saved: the input (12) + fp32 mean and rstd per row: 3 · 8 = 24 B.
    expected = rec("layernorm", OpClass.NORM, flops=P(96, 120, 36), act_read=P(12, 24, 24), act_write=P(12, 12, 0),
                   fixed_write_bytes=P(24, 0, 0), fixed_read_bytes=P(0, 24, 0), weight_read=P(8, 8, 8),
                   weight_write=P(0, 0, 8), param_count=8, saved=Saved(act=12, fixed_bytes=24), shapes=((3, 4),),
                   out_shape=(3, 4), tp_split="sequence", runs_in_low_precision=False,
                   attrs=(("saved_input_elements", 12), ("stats_bytes", 24)))
    assert build("layernorm", rows=3, width=4) == expected


def test_rmsnorm_batchnorm_groupnorm():
    rms = build("rmsnorm", rows=3, width=4)
    # 4/7/2 FLOPs per element; γ only; rstd fp32 per row 3 · 4 = 12 B.
    assert (rms.flops, rms.param_count, rms.saved) == (P(48, 84, 24), 4, Saved(act=12, fixed_bytes=12))
    bn = build("batchnorm", channels=2, spatial=(3, 3))
    # per sample 18 elements; per-channel stats belong to the batch, not the sample.
    assert (bn.flops, bn.param_count, bn.saved, bn.attr("stats_bytes_per_batch")) == (P(144, 180, 54), 4,
                                                                                       Saved(act=18), 16)
    gn = build("groupnorm", channels=4, groups=2, spatial=(2,))
    assert (gn.saved, gn.param_count) == (Saved(act=8, fixed_bytes=16), 8)


# --- element-wise --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, fw, ag, saves_input", [
    ("relu", 1, 1, False), ("relu2", 2, 2, True), ("gelu", 5, 11, True), ("gelu_tanh", 9, 17, True),
    ("silu", 5, 9, True), ("sigmoid", 4, 3, False), ("tanh", 1, 3, False)])
def test_unary_activations(kind, fw, ag, saves_input):
    op = build(kind, shape=(2, 3))
    attrs = (("saved_input_elements", 6),) if saves_input else (("saves", "output"),)
    expected = rec(kind, OpClass.ELEMENTWISE, flops=P(6 * fw, 6 * ag, 0), act_read=P(6, 12, 0), act_write=P(6, 6, 0),
                   saved=Saved(act=6), shapes=((2, 3),), out_shape=(2, 3), tp_split="column", attrs=attrs)
    assert op == expected


def test_swiglu_eager_and_fused():
    # output 2×3 (n = 6) from gate+up 2×6; eager keeps gate, silu(gate), up = 18; fused keeps 12.
    eager = build("swiglu", shape=(2, 3))
    expected = rec("swiglu", OpClass.ELEMENTWISE, flops=P(36, 66, 0), act_read=P(12, 24, 0), act_write=P(6, 12, 0),
                   saved=Saved(act=18), shapes=((2, 6),), out_shape=(2, 3), tp_split="column",
                   attrs=(("fused", False),))
    assert eager == expected
    assert build("swiglu", shape=(2, 3), fused=True).saved == Saved(act=12)


def test_softmax_dropout_add_concat():
    sm = build("softmax", shape=(2, 5))
    assert (sm.flops, sm.saved, sm.op_class) == (P(50, 40, 0), Saved(act=10), OpClass.REDUCTION)
    # dropout keeps a 1-byte bool mask per element; the mask is written forward and read backward.
    dr = build("dropout", shape=(2, 5), p=0.1)
    expected = rec("dropout", OpClass.ELEMENTWISE, flops=P(20, 20, 0), act_read=P(10, 10, 0), act_write=P(10, 10, 0),
                   fixed_write_bytes=P(10, 0, 0), fixed_read_bytes=P(0, 10, 0), saved=Saved(mask=10),
                   shapes=((2, 5),), out_shape=(2, 5), tp_split="sequence", attrs=(("p", 0.1), ("random_draws", 10)))  # a draw per element
    assert dr == expected
    add = build("add", shape=(2, 5))
    assert add == rec("add", OpClass.ELEMENTWISE, flops=P(10, 10, 0), act_read=P(20, 20, 0), act_write=P(10, 10, 0),
                      saved=Saved(), shapes=((2, 5), (2, 5)), out_shape=(2, 5), tp_split="sequence")
    learned = build("add", shape=(2, 5), learned=True)
    assert (learned.param_count, learned.flops, learned.weight_write) == (10, P(10, 0, 10), P(0, 0, 10))
    cat = build("concat", rows=(4,), width=3, learned_rows=1)
    assert (cat.param_count, cat.out_shape, cat.act_write.fw, cat.saved) == (3, (5, 3), 15, Saved())


# --- lookup, loss, MoE ---------------------------------------------------------------------------

def test_embedding_and_cross_entropy():
    # 5 × 4 table, 3 rows: no FLOPs forward, no activation gradient; dW scatter-adds 12 values and is
    # written whole (20) per micro-batch; keeps int64 indices 3 · 8 = 24 B.
    emb = build("embedding", num=5, dim=4, rows=3)
    expected = rec("embedding", OpClass.EMBEDDING, flops=P(0, 0, 12), act_read=P(12, 0, 12), act_write=P(12, 0, 0),
                   fixed_read_bytes=P(24, 0, 24), weight_read=P(0, 0, 20), weight_write=P(0, 0, 20), param_count=20,
                   saved=Saved(fixed_bytes=24), shapes=((3,),), out_shape=(3, 4), tp_split="vocab",
                   attrs=(("num", 5),))
    assert emb == expected
    # 3 rows × 5 classes: fw 5·15 + 3 = 78, agrad 3·15 = 45; keeps fp32 log-probs 60 B + int64 targets 24 B.
    # The backward writes the zero-filled nll gradient (15) and the logits' gradient (15) and reads
    # the first back (15).
    ce = build("cross_entropy", rows=3, classes=5)
    expected = rec("cross_entropy", OpClass.REDUCTION, flops=P(78, 45, 0), act_read=P(15, 15, 0), act_write=P(0, 30, 0),
                   fixed_write_bytes=P(72, 0, 0), fixed_read_bytes=P(24, 84, 0), saved=Saved(fixed_bytes=84),
                   shapes=((3, 5),), out_shape=(1,), tp_split="vocab", runs_in_low_precision=False,
                   attrs=(("log_softmax_bytes", 60),))
    assert ce == expected
    # fused (flash-attn CrossEntropyLoss): reads the logits in their own dtype forward (15) and backward
    # (15), writes only the logits' gradient (15); writes loss + log-sum-exp (2 · 3 · 4 = 24 B) and reads
    # the targets (24) forward, targets + lse (36) backward; keeps the logits (15 act elements), the lse
    # (12 B) and the targets (24 B); no fp32 log-probabilities
    fused = build("cross_entropy", rows=3, classes=5, fused=True)
    expected = rec("cross_entropy", OpClass.REDUCTION, flops=P(78, 45, 0), act_read=P(15, 15, 0),
                   act_write=P(0, 15, 0), fixed_write_bytes=P(24, 0, 0), fixed_read_bytes=P(24, 36, 0),
                   saved=Saved(act=15, fixed_bytes=36), shapes=((3, 5),), out_shape=(1,), tp_split="vocab",
                   attrs=(("fused", True),))
    assert fused == expected


def test_cross_entropy_metric_is_forward_only_fp32_passes_per_call():
    # 3 rows × 5 classes, 2 calls: n = 30 logits read in the activation dtype; per call and logit the fp32
    # upcast written (4 B), read and written again by log_softmax (4 + 4 B): writes 8 · 30 + 2 · 4 (the
    # sums) = 248 B, reads 4 · 30 + 2 · 3 · (4 + 8) (gathered log-prob, int64 target) = 192 B; FLOPs
    # 5 · 30 + 3 · 2 = 156; no backward, nothing kept
    m = build("cross_entropy_metric", rows=3, classes=5, calls=2)
    expected = rec("cross_entropy_metric", OpClass.REDUCTION, flops=P(156, 0, 0), act_read=P(30, 0, 0),
                   act_write=P(0, 0, 0), fixed_write_bytes=P(248, 0, 0), fixed_read_bytes=P(192, 0, 0),
                   shapes=((3, 5),), out_shape=(1,), tp_split="vocab", runs_in_low_precision=False,
                   attrs=(("calls", 2),))
    assert m == expected
    with pytest.raises(ValueError, match="calls"):
        build("cross_entropy_metric", rows=3, classes=5, calls=0)


def test_moe_router_and_experts():
    # 4 tokens, h 2, 4 experts, top 2: router logits 2·4·2·4 = 64 FLOPs per phase; 8 params.
    r = build("moe_router", rows=4, hidden=2, experts=4, top_k=2)
    assert (r.flops, r.param_count, r.moe, r.tp_split) == (P(64, 64, 64), 8, MoEInfo(4, 2, 1.0), "replicate")
    # fp32 probabilities 4·4·4 = 64 B and int64 indices 4·2·8 = 64 B kept; the input 8 elements.
    assert r.saved == Saved(act=8, fixed_bytes=128)
    # experts: swiglu f = 3: routed tokens 8, 3 matrices: fw 2·8·2·3·3 = 288; params 4 experts × 18 = 72.
    # saved per routed token: dispatched x (2) + fc1 out (6) + silu out (3) + fc2 in (3) + expert out (2)
    # + weight (1) = 17 → 136.
    e = build("moe_experts", rows=4, hidden=2, ffn_hidden=3, experts=4, top_k=2)
    assert (e.flops, e.param_count, e.saved, e.tp_split) == (P(288, 288, 288), 72, Saved(act=136), "expert")
    assert e.attr("params_per_expert") == 18
    gelu = build("moe_experts", rows=4, hidden=2, ffn_hidden=3, experts=4, top_k=2, activation="gelu", bias=True)
    # 2 matrices: 12 + biases (3 + 2) = 17 per expert; fw 2·8·2·3·2 = 192.
    assert (gelu.flops.fw, gelu.param_count) == (192, 68)


# --- registry behaviour --------------------------------------------------------------------------

def test_unknown_kind_is_missing_rule():
    with pytest.raises(MissingRuleError, match="no cost rule for op kind 'warp_drive'"):
        make_op("warp_drive", "t/x", "t")


def test_bad_parameters_are_spec_errors():
    with pytest.raises(SpecError) as err:
        make_op("linear", "layers.0/fc", "layers.0", in_features=4)
    assert err.value.fields == ["layers.0/fc"]
    with pytest.raises(SpecError, match="multiple of kv_heads"):
        build("attention", heads=3, kv_heads=2, head_dim=4, seq=2)
    with pytest.raises(SpecError, match="p=0 is the identity"):
        build("dropout", shape=(2,), p=0.0)
    with pytest.raises(SpecError, match="does not save its input"):
        build("relu", shape=(2,), input_saved_by="t/y")


def test_input_saved_by_drops_the_shared_input():
    op = build("linear", rows=2, in_features=4, out_features=3, input_saved_by="attn/core")
    assert op.saved == Saved(act=0)
    assert op.attr("input_saved_by") == "attn/core" and op.attr("saved_input_elements") == 0


def test_every_listed_kind_has_a_rule():
    wanted = {"linear", "matmul", "bmm", "conv1d", "conv2d", "attention", "layernorm", "rmsnorm", "batchnorm",
              "groupnorm", "relu", "relu2", "gelu", "silu", "swiglu", "sigmoid", "tanh", "softmax", "dropout", "add",
              "embedding", "rotary", "maxpool2d", "avgpool2d", "adaptive_avgpool2d", "global_avgpool",
              "cross_entropy", "moe_router", "moe_experts"}
    assert wanted <= set(registered_kinds())


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 7), st.integers(1, 4), st.integers(0, 3), st.integers(1, 3))
def test_conv_output_size_matches_sliding_windows(size, kernel, stride, pad, dil):
    span = dil * (kernel - 1) + 1
    padded = size + 2 * pad
    if span > padded:
        with pytest.raises(ValueError):
            conv_out_size(size, kernel, stride, pad, dil)
        return
    starts = [i for i in range(0, padded) if i + span <= padded and i % stride == 0]
    assert conv_out_size(size, kernel, stride, pad, dil) == len(starts)


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_linear_phases_are_equal_and_scale(m, k, n):
    op = build("linear", rows=m, in_features=k, out_features=n)
    assert op.flops == P(2 * m * k * n, 2 * m * k * n, 2 * m * k * n)
    twice = build("linear", rows=2 * m, in_features=k, out_features=n)
    assert twice.flops == op.flops * 2 and replace(twice, flops=op.flops).param_count == op.param_count
