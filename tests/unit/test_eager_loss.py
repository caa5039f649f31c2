"""The LM loss as its framework's chain of kernels on logits upcast by a copy of their own
(``Stack.loss_kernel`` "eager" — torchtitan's ``F.cross_entropy(logits.float(), ...)`` — and "in-place" —
Megatron's unfused ``vocab_parallel_cross_entropy`` — at 16-bit activations): the rule's hand-derived
traffic, the same counted under PyTorch's dispatcher, and the stack reaching the graph."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.graph.op import PhaseCounts as P
from simtrain.graph.op import Saved
from simtrain.graph.rules import make_op

torch = pytest.importorskip("torch")


def build(**params):
    return make_op("cross_entropy", "t/loss", "t", **params)


def test_eager_chain_record_by_hand():
    # rows 3 × classes 5: n = 15 logits. Activation elements: the forward reads the 16-bit logits (n), the
    # backward writes their gradient (n). fp32 bytes: forward reads the copy (4n) and one log-probability
    # a row (4 · 3) with its int64 target (8 · 3), writes the copy and the log-probabilities (8n) and the
    # per-row losses (4 · 3); backward reads the nll gradient and the log-probabilities, then the log-softmax
    # gradient (12n) and the targets (8 · 3), writes the zero-filled nll gradient and the log-softmax
    # gradient (8n).
    op = build(rows=3, classes=5, chain="eager")
    assert op.act_read == P(15, 0, 0) and op.act_write == P(0, 15, 0)
    assert op.fixed_read_bytes == P(60 + 12 + 24, 180 + 24, 0)
    assert op.fixed_write_bytes == P(120 + 12, 120, 0)
    assert op.attr("aten_kernels") == P(3, 4, 0)
    generic = build(rows=3, classes=5)
    # same math, same kept tensors (fp32 log-probabilities and the targets): more kernels and bytes
    assert (op.flops, op.saved) == (generic.flops, generic.saved) == (generic.flops, Saved(fixed_bytes=60 + 24))
    assert generic.attr("aten_kernels") is None
    with pytest.raises(ValueError, match="exclude each other"):
        build(rows=3, classes=5, fused=True, chain="eager")


def test_megatron_chain_record_by_hand():
    # rows 3 × classes 5: n = 15. fp32 bytes a logit: forward reads the copy for max, sub, exp, sum and div
    # (20) and writes the copy, sub, exp and div (16); backward mul_ reads and writes the kept softmax, the
    # engine's cast reads it (8 / 4); plus the generic per-row bytes.
    op = build(rows=3, classes=5, chain="in-place")
    assert op.act_read == P(15, 0, 0) and op.act_write == P(0, 15, 0)
    assert op.fixed_read_bytes == P(300 + 12 + 24, 120 + 24, 0)
    assert op.fixed_write_bytes == P(240 + 12, 60, 0)
    assert op.attr("aten_kernels") == P(18, 8, 0)
    assert op.saved == build(rows=3, classes=5).saved          # the fp32 softmax in place of log-probabilities
    with pytest.raises(ValueError, match="chain must be one of"):
        build(rows=3, classes=5, chain="fused")


def _phase_bytes(op, phase: str, act_bytes: int = 2) -> float:
    return ((getattr(op.act_read, phase) + getattr(op.act_write, phase)) * act_bytes
            + getattr(op.fixed_read_bytes, phase) + getattr(op.fixed_write_bytes, phase))


class _Traffic:
    """Per aten op under ``TorchDispatchMode``: its name and the bytes of every tensor argument and
    result (views and the autograd seed apart)."""

    SKIP = {"detach", "view", "_unsafe_view", "ones_like"}

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        outer = self
        self.ops: list[tuple[str, float, float]] = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = func._schema.name.split("::")[-1]
                if name not in outer.SKIP:
                    ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
                    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
                    outer.ops.append((name, sum(t.numel() * t.element_size() for t in ins),
                                      sum(t.numel() * t.element_size() for t in outs)))
                return out
        self.mode = Mode()


def test_eager_chain_equals_pytorch_count():
    # torchtitan's loss on bf16 logits. The dispatcher passes nll_loss its whole input and nll_loss_backward
    # its whole input (for the shape) besides the gradient it writes; the kernels read one log-probability
    # a row: those arguments are taken out. The CUDA nll_loss_backward zero-fills its output before the
    # scatter: one kernel more than the dispatcher sees.
    rows, classes = 64, 4096
    logits = torch.randn(rows, classes, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, classes, (rows,))
    fw = _Traffic()
    with fw.mode:
        loss = torch.nn.functional.cross_entropy(logits.float(), target)
    bw = _Traffic()
    with bw.mode:
        loss.backward()
    fp32_logits = 4 * rows * classes
    assert [name for name, _, _ in fw.ops] == ["_to_copy", "_log_softmax", "nll_loss_forward"]
    assert [name for name, _, _ in bw.ops] == ["nll_loss_backward", "_log_softmax_backward_data", "_to_copy"]
    fw_bytes = sum(i + o for _, i, o in fw.ops) - fp32_logits            # nll_loss_forward's whole input
    bw_bytes = sum(i + o for _, i, o in bw.ops) - fp32_logits            # nll_loss_backward's whole input
    op = build(rows=rows, classes=classes, chain="eager")
    assert fw_bytes == pytest.approx(_phase_bytes(op, "fw"), rel=0.01)
    assert bw_bytes == pytest.approx(_phase_bytes(op, "agrad"), rel=0.01)
    k = op.attr("aten_kernels")
    assert (len(fw.ops), len(bw.ops) + 1) == (k.fw, k.agrad)


_ROW_INDEXING = {"index", "index_put_"}
"""A gather or scatter of one value a row: it touches that value, not the tensor it indexes."""
_NOT_KERNELS = {"view", "unsqueeze", "lift_fresh", "detach"}


def _logit_traffic(fn, n: int) -> tuple[float, int]:
    """Bytes of the logits-sized tensors each kernel of ``fn`` reads (its distinct inputs) and writes (its
    distinct results: an in-place or ``out=`` op writes the storage it read), and the kernels."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    total, kernels = [0.0], [0]

    def distinct(tensors):
        seen = {}
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.numel() == n:
                seen[t.untyped_storage().data_ptr()] = t.numel() * t.element_size()
        return sum(seen.values())

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._schema.name.split("::")[-1]
            if name not in _NOT_KERNELS:
                kernels[0] += 1
                if name not in _ROW_INDEXING:
                    total[0] += distinct(tree_flatten((args, kwargs))[0]) + distinct(tree_flatten(out)[0])
            return out
    with Mode():
        fn()
    return total[0], kernels[0]


def test_megatron_chain_equals_pytorch_count():
    # The passes of Megatron-Core's unfused vocab-parallel loss (core_r0.8.0 tensor_parallel/cross_entropy.py)
    # at one tensor-parallel rank, written out as the tensor ops it issues: the upcast copy, the row maximum
    # and its subtraction, the target's mask and shift, the predicted logit's gather, exp in place, the row
    # sums, the loss, the softmax in place; backward the one-hot subtracted in place, the upstream gradient
    # multiplied in, the autograd engine's cast back to the input's dtype.
    rows, classes = 64, 4096
    logits = torch.randn(rows, classes, dtype=torch.bfloat16)
    target = torch.randint(0, classes, (rows,))
    kept = {}

    def forward():
        x = logits.float()
        row_max = torch.max(x, dim=-1)[0]
        outside = (target < 0) | (target >= classes)
        local = target.clone() - 0
        local[outside] = 0
        x -= row_max.unsqueeze(dim=-1)
        at = torch.arange(0, rows)
        picked = x.view(-1, classes)[at, local.view(-1)].clone().contiguous()
        picked[outside] = 0.0
        torch.exp(x, out=x)
        sums = x.sum(dim=-1)
        loss = torch.log(sums) - picked
        x.div_(sums.unsqueeze(dim=-1))
        kept.update(softmax=x, outside=outside, local=local, loss=loss)

    def backward():
        grad = kept["softmax"]
        at = torch.arange(0, rows)
        grad.view(-1, classes)[at, kept["local"].view(-1)] -= 1.0 - kept["outside"].view(-1).float()
        grad.mul_(upstream.unsqueeze(dim=-1))
        grad.to(torch.bfloat16)

    fw_bytes, fw_kernels = _logit_traffic(forward, rows * classes)
    upstream = torch.ones(rows)
    bw_bytes, bw_kernels = _logit_traffic(backward, rows * classes)
    op = build(rows=rows, classes=classes, chain="in-place")
    assert fw_bytes == pytest.approx(_phase_bytes(op, "fw"), rel=0.01)
    assert bw_bytes == pytest.approx(_phase_bytes(op, "agrad"), rel=0.01)
    k = op.attr("aten_kernels")
    assert (fw_kernels, bw_kernels) == (k.fw, k.agrad)


def _llama(stack, precision="bf16"):
    model = st.load_model("llama3-8b")
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=2048, precision=precision, stack=stack)
    return st.estimate(model, st.load_cluster("dgx-h100", nodes=1), cfg)


def test_stack_reaches_the_graph_and_the_step():
    eager = st.load_stack("fsdp2")
    generic = eager.with_overrides(loss_kernel="upcast")
    a, b = _llama(generic), _llama(eager)
    assert b.step_time_s > a.step_time_s
    assert b.compute_by_class_s["matmul"] == pytest.approx(a.compute_by_class_s["matmul"])
    # the loss's memory-bound time grows by what the bytes say (36 B a logit against 16): at least ×2
    extra = b.compute_by_class_s["reduction"] - a.compute_by_class_s["reduction"]
    assert extra > a.compute_by_class_s["reduction"] * 0.5
    # fp32 activations: the upcast is no copy, and the chain is the generic rule's traffic
    assert _llama(eager, "fp32").step_time_s == pytest.approx(_llama(generic, "fp32").step_time_s)


def test_megatron_stacks_reach_the_step():
    inplace = st.load_stack("megatron-core")
    generic = inplace.with_overrides(loss_kernel="upcast")
    a, b = _llama(generic), _llama(inplace)
    assert b.step_time_s > a.step_time_s
    assert b.compute_by_class_s["reduction"] > 2 * a.compute_by_class_s["reduction"]   # 52 B a logit against 16
    # fp32 logits: no upcast copy, and the chain is not priced apart there (TransformerArch.loss_chain)
    assert _llama(inplace, "fp32").step_time_s == pytest.approx(_llama(generic, "fp32").step_time_s)


def test_presets():
    for name in ("fsdp2", "fsdp2-compile"):
        assert st.load_stack(name).loss_kernel == "eager", name
    for name in ("megatron-core", "megatron-lm", "deepspeed"):
        assert st.load_stack(name).loss_kernel == "in-place", name
