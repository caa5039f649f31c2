"""RMSNorm and rotary written as eager fp32 PyTorch ops (``Stack.norm_kernel`` / ``rotary_kernel``
"eager-fp32"): the rules' hand-derived traffic, the same counted under PyTorch's dispatcher, and the
stack reaching the graph."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.graph.op import PhaseCounts as P
from simtrain.graph.op import Saved
from simtrain.graph.rules import make_op

torch = pytest.importorskip("torch")


def build(kind: str, **params):
    return make_op(kind, "t/x", "t", **params)


def test_eager_rmsnorm_record_by_hand():
    # rows 3 × width 4: n = 12, rstd 3 · 4 = 12 B. Activation elements (fw, agrad, wgrad): read 2n, 2n, 3n,
    # written 2n, 2n, n; fp32 bytes read 16n, 44n (+ rstd), written 12n (+ rstd), 32n.
    op = build("rmsnorm", rows=3, width=4, eager_fp32=True)
    assert op.act_read == P(24, 24, 36) and op.act_write == P(24, 24, 12)
    assert op.fixed_read_bytes == P(192, 528 + 12, 0) and op.fixed_write_bytes == P(144 + 12, 384, 0)
    # keeps x̂ (one activation element each) and the fp32 copy of x (4 B each) and rstd, not x
    assert op.saved == Saved(act=12, fixed_bytes=48 + 12)
    assert op.attr("aten_kernels") == P(8, 14, 2)
    fused = build("rmsnorm", rows=3, width=4)
    assert (fused.flops, fused.param_count) == (op.flops, op.param_count)   # same math, more kernels
    assert fused.attr("aten_kernels") is None


def test_eager_rotary_record_by_hand():
    # s 3, 2 query + 1 kv heads of 4 dims: n = 36 rotated elements; 8 fp32 bytes read and 8 written per
    # element each way beside the fused kernel's activation read and write.
    op = build("rotary", seq=3, heads=2, kv_heads=1, head_dim=4, eager_fp32=True)
    assert op.act_read == P(36, 36, 0) and op.act_write == P(36, 36, 0)
    assert op.fixed_read_bytes == P(288, 288, 0) and op.fixed_write_bytes == P(288, 288, 0)
    assert op.saved == Saved()
    assert build("rotary", seq=3, heads=2, kv_heads=1, head_dim=4).fixed_read_bytes == P(0, 0, 0)


class _Traffic:
    """Bytes each non-view aten op reads and writes, per phase, under ``TorchDispatchMode``: a tensor
    counts its storage once (a broadcast view reads its small storage, not its expanded size)."""

    VIEWS = {"view", "_unsafe_view", "view_as_complex", "view_as_real", "reshape", "expand", "t", "transpose",
             "detach", "alias", "unsqueeze", "squeeze", "slice", "select", "permute", "_reshape_alias"}

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        outer = self
        self.bytes, self.kernels = 0, 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func._schema.name.split("::")[-1] not in outer.VIEWS:
                    tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
                    outer.bytes += sum(min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
                                       for t in tensors)
                    outer.kernels += 1
                return out
        self.mode = Mode()


def _count(fn):
    t = _Traffic()
    with t.mode:
        fn()
    return t.bytes, t.kernels


def _phase_bytes(op, phase: str, act_bytes: int = 2) -> float:
    return ((getattr(op.act_read, phase) + getattr(op.act_write, phase)) * act_bytes
            + getattr(op.fixed_read_bytes, phase) + getattr(op.fixed_write_bytes, phase))


def test_eager_rmsnorm_equals_pytorch_count():
    # torchtitan's 2024 RMSNorm (and HF LlamaRMSNorm) on bf16: the rule's bytes per phase within 1 %
    # (per-row work is the difference), its kernels exactly.
    rows, width = 8, 4096
    x = torch.randn(rows, width, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(width, dtype=torch.bfloat16, requires_grad=True)

    def forward():
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w

    fw_bytes, fw_kernels = _count(lambda: forward())
    y = forward()
    dy = torch.randn_like(y)
    bw_bytes, bw_kernels = _count(lambda: y.backward(dy))
    op = build("rmsnorm", rows=rows, width=width, eager_fp32=True)
    assert fw_bytes == pytest.approx(_phase_bytes(op, "fw"), rel=0.01)
    assert bw_bytes == pytest.approx(_phase_bytes(op, "agrad") + _phase_bytes(op, "wgrad"), rel=0.01)
    k = op.attr("aten_kernels")
    assert (fw_kernels, bw_kernels) == (k.fw, k.agrad + k.wgrad)


def test_eager_rotary_equals_pytorch_count():
    # torchtitan's apply_rotary_emb on Q (8 heads) and K (2 heads); the table is per position, shared.
    s, a, kv, d = 64, 8, 2, 128
    q = torch.randn(1, s, a, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, s, kv, d, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.polar(torch.ones(s, d // 2), torch.randn(s, d // 2)).view(1, s, 1, d // 2)

    def rope(x):
        x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x_ * freqs).flatten(3).type_as(x)

    fw_bytes, fw_kernels = _count(lambda: (rope(q), rope(k)))
    yq, yk = rope(q), rope(k)
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    bw_bytes, bw_kernels = _count(lambda: torch.autograd.backward((yq, yk), (gq, gk)))
    op = build("rotary", seq=s, heads=a, kv_heads=kv, head_dim=d, eager_fp32=True)
    table = 2 * s * (d // 2) * 8                          # the complex64 table, read in each phase
    assert fw_bytes - table == pytest.approx(_phase_bytes(op, "fw"), rel=0.01)
    # the backward also conjugates and copies the table (read + write, twice)
    assert bw_bytes - 5 * table == pytest.approx(_phase_bytes(op, "agrad"), rel=0.01)
    kernels = op.attr("aten_kernels")
    assert (fw_kernels, bw_kernels) == (kernels.fw, kernels.agrad)


def _llama(stack):
    model = st.load_model("llama3-8b")
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=2048, precision="bf16", stack=stack)
    return st.estimate(model, st.load_cluster("dgx-h100", nodes=1), cfg)


def test_matrix_rotary_record_by_hand():
    # n = 36 rotated elements (as above); 16 fp32 bytes read and 16 written per element each way
    op = build("rotary", seq=3, heads=2, kv_heads=1, head_dim=4, eager_fp32=True, rotation_matrix=True)
    assert op.act_read == P(36, 36, 0) and op.act_write == P(36, 36, 0)
    assert op.fixed_read_bytes == P(576, 576, 0) and op.fixed_write_bytes == P(576, 576, 0)
    assert op.attr("aten_kernels") == P(8, 8, 0) and op.saved == Saved()
    with pytest.raises(ValueError, match="rotation_matrix"):
        build("rotary", seq=3, heads=2, kv_heads=1, head_dim=4, rotation_matrix=True)


def test_matrix_rotary_equals_pytorch_count():
    # IBM foundation-model-stack's rotary (fms/modules/positions.py adjusted_qk @006bd7ed) on Q (8 heads)
    # and K (2 heads): pairs cast up, times the position's fp32 2×2 rotation, summed over the pair, cast
    # down. The per-position table (s · d/2 · 4 fp32) is read by each multiply, forward and backward.
    s, a, kv, d = 64, 8, 2, 128
    q = torch.randn(1, s, a, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, s, kv, d, dtype=torch.bfloat16, requires_grad=True)
    angle = torch.randn(s, d // 2)
    cos, sin = angle.cos(), angle.sin()
    rotation = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2).unsqueeze(0)

    def rope(x):
        pairs = x.float().view(*x.shape[:-1], -1, 2)
        return rotation[:, :, None].mul(pairs.unsqueeze(-2)).sum(5).flatten(3).type_as(x)

    fw_bytes, fw_kernels = _count(lambda: (rope(q), rope(k)))
    yq, yk = rope(q), rope(k)
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    bw_bytes, bw_kernels = _count(lambda: torch.autograd.backward((yq, yk), (gq, gk)))
    op = build("rotary", seq=s, heads=a, kv_heads=kv, head_dim=d, eager_fp32=True, rotation_matrix=True)
    table = rotation.numel() * 4
    assert fw_bytes - 2 * table == pytest.approx(_phase_bytes(op, "fw"), rel=0.01)
    assert bw_bytes - 2 * table == pytest.approx(_phase_bytes(op, "agrad"), rel=0.01)
    kernels = op.attr("aten_kernels")
    assert (fw_kernels, bw_kernels) == (kernels.fw, kernels.agrad)


def test_stack_reaches_the_graph_and_the_step():
    fused = st.load_stack("fsdp2").with_overrides(rotary_kernel="fused")
    eager = fused.with_overrides(norm_kernel="eager-fp32", rotary_kernel="eager-fp32")
    a, b = _llama(fused), _llama(eager)
    assert b.step_time_s > a.step_time_s
    assert b.compute_by_class_s["norm"] > 5 * a.compute_by_class_s["norm"]
    assert b.compute_by_class_s["matmul"] == pytest.approx(a.compute_by_class_s["matmul"])
    matrix = _llama(eager.with_overrides(rotary_kernel="eager-fp32-matrix"))
    assert matrix.step_time_s > b.step_time_s                      # 36 B per element and phase against 20
    assert matrix.memory.activations_bytes == b.memory.activations_bytes
    # no recompute: every norm keeps 4 B per element more (the fp32 copy of its input); 2 per layer + the
    # final one, 2048 tokens × 4096 wide per micro-batch
    extra = b.memory.activations_bytes - a.memory.activations_bytes
    assert extra == pytest.approx((2 * 32 + 1) * 2048 * 4096 * 4, rel=0.02)


def test_presets():
    assert st.load_stack("fsdp2").rotary_kernel == "eager-fp32"        # torchtitan's complex fp32 rotary
    assert st.load_stack("fsdp2").norm_kernel == "fused"
    for name in ("fsdp2-compile", "megatron-core", "llm-foundry", "reference"):
        s = st.load_stack(name)
        assert (s.norm_kernel, s.rotary_kernel) == ("fused", "fused"), name
