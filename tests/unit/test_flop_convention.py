"""Model FLOPs count matrix work only (PaLM App. B, Megatron-LM, FlopCounterMode); vector-op FLOPs are a
separate figure; a ``.sum()`` loss keeps the last layer's activation-gradient FLOPs per sample.

Hand derivation, a bias-free two-layer MLP IN=8 → H=16 → OUT=4 under ``.sum()``, captured at B = 3:
  layer 0: fw 2·B·IN·H, wgrad 2·B·IN·H, no agrad (the input needs no gradient);
  layer 1: fw 2·B·H·OUT, agrad 2·B·H·OUT (dX = dY·W), wgrad 2·B·H·OUT — fw 2·B·H·OUT, bw 4·B·H·OUT;
  loss sum: B·OUT − 1 adds in the forward, which the ATen rule prices at B·OUT elements (a vector op).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import simtrain as st  # noqa: E402
from simtrain.graph.summary import model_flops  # noqa: E402

IN, H, OUT, B = 8, 16, 4, 3


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, H, bias=False), torch.nn.Linear(H, OUT, bias=False))


@pytest.fixture(scope="module")
def model():
    return st.Model.from_torch(_mlp(), (torch.randn(B, IN),))


def test_sum_loss_last_layer_gradient_is_per_sample(model):
    last = next(op for op in model.ops if op.name == "1/linear")
    assert (last.flops.fw, last.flops.agrad, last.flops.wgrad) == (2 * H * OUT, 2 * H * OUT, 2 * H * OUT)
    assert last.attr("flops_per_batch") is None  # nothing left where the estimator does not look
    first = next(op for op in model.ops if op.name == "0/linear")
    assert (first.flops.fw, first.flops.agrad, first.flops.wgrad) == (2 * IN * H, 0.0, 2 * IN * H)


@pytest.mark.parametrize("batch", [B, 12])
def test_estimator_model_flops_are_matrix_only_and_scale_with_batch(model, batch):
    cfg = st.TrainConfig(global_batch_size=batch, micro_batch_size=batch, precision="fp32", optimizer="sgd")
    r = st.estimate(model, st.Cluster.single(st.load_device("h100-sxm5-80gb")), cfg)
    matrix = batch * (2 * IN * H + 2 * IN * H) + batch * (3 * 2 * H * OUT)
    assert r.model_flops_per_step == matrix
    assert r.vector_flops_per_step == batch * OUT  # the loss's sum: B·OUT elements
    assert r.mfu == pytest.approx(matrix / r.step_time_s / r.peak_flops_per_s)


def test_summary_columns_split_model_and_vector_flops(model):
    df = model.summary()
    total = df[df.name == "TOTAL"].iloc[0]
    assert total.model_flops == 4 * IN * H + 6 * H * OUT
    assert total.vector_flops == OUT
    assert total.model_flops == model_flops(model, matmul_only=True).total
    assert total.model_flops + total.vector_flops == model_flops(model).total


def test_vector_ops_still_take_time():
    """A ReLU between the layers adds vector FLOPs and time, but no model FLOPs."""
    torch.manual_seed(0)
    plain = st.Model.from_torch(_mlp(), (torch.randn(B, IN),))
    with_relu = st.Model.from_torch(torch.nn.Sequential(torch.nn.Linear(IN, H, bias=False), torch.nn.ReLU(),
                                                        torch.nn.Linear(H, OUT, bias=False)), (torch.randn(B, IN),))
    cfg = st.TrainConfig(global_batch_size=B, micro_batch_size=B, precision="fp32", optimizer="sgd")
    cl = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    a, b = st.estimate(plain, cl, cfg), st.estimate(with_relu, cl, cfg)
    assert a.model_flops_per_step == b.model_flops_per_step
    assert b.vector_flops_per_step > a.vector_flops_per_step
    assert b.time_breakdown_s["compute"] > a.time_breakdown_s["compute"]


# --- nn.MultiheadAttention: its projections and its attention core, not one op -------------------
E, HEADS, L = 8, 2, 5
D = E // HEADS


class _MHA(torch.nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(E, HEADS, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x):
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


def _aten(op, name: str, phase: str) -> float:
    return sum(f for n, ph, f in op.attr("aten_flops") if n == name and ph == phase)


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_is_captured_as_projections_plus_attention_core(need_weights):
    """Per sample (L = 5 tokens, E = 8, 2 heads of d = 4): in_proj x·W_inᵀ 2·L·E·3E = 1,920 FLOPs,
    out_proj 2·L·E·E = 640, QKᵀ and A·V 2·H·L·L·d = 400 each (800 in one SDPA op)."""
    torch.manual_seed(0)
    model = st.Model.from_torch(_MHA(need_weights), (torch.randn(B, L, E),))
    names = [op.name for op in model.ops]
    assert not any("multi_head_attention_forward" in n for n in names)
    inp, out = (next(op for op in model.ops if op.name == n) for n in ("attn/linear", "attn/linear.1"))
    assert inp.gemm.m == L and (inp.gemm.n, inp.gemm.k) == (3 * E, E) and inp.param_count == 3 * E * E + 3 * E
    assert out.gemm.m == L and (out.gemm.n, out.gemm.k) == (E, E) and out.param_count == E * E + E
    assert _aten(inp, "mm", "fw") == 2 * L * E * 3 * E == 1920
    assert _aten(out, "addmm", "fw") == 2 * L * E * E == 640
    assert _aten(out, "mm", "agrad") == _aten(out, "mm", "wgrad") == 640
    core = [op for op in model.ops if op.name.startswith("attn/") and op not in (inp, out)
            and op.op_class.value in ("attention", "matmul")]
    assert sum(op.flops.fw for op in core) == 2 * 2 * HEADS * L * L * D == 800
    if need_weights:  # explicit scores: bmm, softmax, bmm
        assert [op.kind for op in core] == ["bmm", "bmm"]
        assert any(op.kind == "softmax" for op in model.ops)
    else:
        assert [op.kind for op in core] == ["attention"] and core[0].attention is not None
