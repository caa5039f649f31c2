"""Table lookups and the loss: ``embedding`` and ``cross_entropy``.

``embedding`` (a gather of ``rows`` rows of a num × dim table per sample): no FLOPs forward; no
activation gradient (the indices are integers); the weight gradient scatter-adds ``rows·dim``
values (one add each) into a dense num × dim gradient, which is written whole per micro-batch.
PyTorch keeps the int64 indices (8 B per row, ``fixed_bytes``).

``cross_entropy`` over ``classes`` logits for ``rows`` rows per sample (``log_softmax`` +
``nll_loss``): forward 5 FLOPs per logit (max, −max, exp, Σ, −log Σ) plus one per row (the gather);
agrad 3 per logit (exp(log p) − one-hot, ×scale). The backward moves what PyTorch's two backward
kernels move (ATen ``nll_loss_backward``, ``_log_softmax_backward_data``): the first writes a
zero-filled logits-sized gradient and scatters one value per row into it; the second reads that
gradient and the kept log-probabilities and writes the logits' gradient, so two logits-sized writes
and one logits-sized read besides the log-probabilities (a single fused pass would write one). Mixed precision (autocast) runs it in fp32, so
the log-softmax output it keeps is fp32 (4 B per logit) whatever the activation dtype, and
``nll_loss`` keeps the int64 targets: both are ``fixed_bytes``. The forward also writes the fp32
per-row losses (4 B per row) before the mean.

``cross_entropy_metric``: the same loss evaluated ``calls`` more times on the kept logits, forward only
and outside autograd, for a trainer's metrics (``Stack.train_metric_losses``): each call reads the
logits in the activation dtype, writes the fp32 upcast autocast makes (4 B per logit), reads it for
``log_softmax`` and writes fp32 log-probabilities (4 + 4 B), then gathers one per row against the int64
targets and sums. No backward, nothing kept.

``cross_entropy`` with a ``chain`` (``Stack.loss_kernel`` "eager" or "in-place" at 16-bit activations):
the loss as its framework runs it, each step its own kernel on logits upcast by a copy of their own,
every logits-sized tensor after the copy in fp32. Per logit, a = the activation dtype (each chain counted
under ``TorchDispatchMode`` in tests/unit/test_eager_loss.py; a gather or a scatter of one value a row
touches that value, not the whole tensor it indexes):

| chain | phase | kernels | activation elements read / written | fp32 bytes read / written per logit |
|-------|-------|---------|------------------------------------|-------------------------------------|
| ``eager``: PyTorch's ``F.cross_entropy(logits.float(), ...)`` uncompiled (torchtitan), or autocast's fp32 cast of the loss input | fw | 3: ``_to_copy`` up, ``_log_softmax``, ``nll_loss_forward`` | 1 / 0 | 4 / 8 |
| | agrad | 4: ``nll_loss_backward`` (its CUDA fill of the zeroed gradient, then the scatter), ``_log_softmax_backward_data``, ``_to_copy`` down | 0 / 1 | 12 / 8 |
| ``in-place``: Megatron's ``vocab_parallel_cross_entropy`` unfused (Megatron-Core core_r0.8.0 ``tensor_parallel/cross_entropy.py``; Megatron-LM's of 2020 and 2023, 52a5f2f and 285068c8, and BigScience's Megatron-DeepSpeed the same passes, the last with a clone of the fp32 logits first, not priced) | fw | 18: ``_to_copy`` up, ``max``, ``sub_``, ``exp`` (out=), ``sum``, ``div_`` over the logits; 12 on a row each (target mask and shift, the predicted logit's gather, log, loss) | 1 / 0 | 20 / 16 |
| | agrad | 8: ``mul_`` over the kept softmax and the engine's ``_to_copy`` down; 6 on a row each (the one-hot subtracted in place) | 0 / 1 | 8 / 4 |

At 16-bit activations the eager chain is 14 B forward and 22 B backward a logit (36 B), Megatron's 38 and
14 (52 B), against the generic rule's single pass of 16 B. What they keep is the generic rule's 4 B a
logit (eager: the fp32 log-probabilities; in-place: the fp32 softmax, which its backward turns into the
gradient in place) and the targets. The tensor-parallel all-reduces of Megatron's row maxima and sums are
not counted (three of a few kB a micro-batch).
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.op import Saved
from simtrain.graph.rules._util import attrs_of, pc, pos_int
from simtrain.graph.rules.registry import rule

__all__ = ["embedding", "cross_entropy", "cross_entropy_metric", "LOSS_CHAINS"]

INDEX_BYTES = 8
FP32_BYTES = 4


@rule("embedding")
def embedding(*, num: int, dim: int, rows: int = 1, tied_to: str | None = None) -> dict:
    """Look up ``rows`` rows per sample in a ``num`` × ``dim`` table. ``tied_to`` names the op that
    owns the table (a multi-token-prediction module's lookup of the shared embedding, DeepSeek-V3
    §2.2): its gradient is written here, its parameters counted once, by the owner (as ``linear``)."""
    v, h, r = pos_int("num", num), pos_int("dim", dim), pos_int("rows", rows)
    out = r * h
    idx = INDEX_BYTES * r
    return dict(
        op_class=OpClass.EMBEDDING, flops=pc(0, 0, out), act_read=pc(out, 0, out), act_write=pc(out),
        fixed_read_bytes=pc(idx, 0, idx), weight_read=pc(0, 0, v * h), weight_write=pc(0, 0, v * h),
        param_count=0 if tied_to else v * h, saved=Saved(fixed_bytes=idx), shapes=((r,),), out_shape=(r, h),
        tp_split="vocab", attrs=attrs_of(num=v, tied_to=tied_to),
    )


#: Each loss chain per logit (module table): kernels, activation elements read / written, fp32 bytes
#: read / written, each as (fw, agrad).
LOSS_CHAINS = {
    "eager": ((3, 4), ((1, 0), (0, 1)), ((4, 12), (8, 8))),
    "in-place": ((18, 8), ((1, 0), (0, 1)), ((20, 8), (16, 4))),
}


@rule("cross_entropy")
def cross_entropy(*, rows: int, classes: int, fused: bool = False, chain: str | None = None) -> dict:
    """Softmax cross-entropy of ``rows`` × ``classes`` logits per sample against integer targets.

    Unfused (PyTorch ``F.cross_entropy`` under autocast, Megatron's ``logits.float()``): the logits are
    upcast and the fp32 log-probabilities are kept for the backward (4 B per logit), whose gradient is
    fp32 as well (cost/memory.py ``fp32_logits_grad_bytes``). ``fused``: one kernel reads the logits in
    their own dtype and computes in registers (flash-attn ``CrossEntropyLoss``, llm-foundry's default
    ``loss_fn: fused_crossentropy``: ``save_for_backward(logits, lse, labels)``, the gradient written as
    ``empty_like(logits)``): it keeps the logits and one fp32 log-sum-exp per row, nothing in fp32 per
    logit. ``chain`` ("eager", "in-place"): the framework's chain of kernels on logits upcast by a copy of
    their own (module doc); it keeps what the unfused rule keeps."""
    r, c = pos_int("rows", rows), pos_int("classes", classes)
    n = r * c
    targets = INDEX_BYTES * r
    if chain is not None and chain not in LOSS_CHAINS:
        raise ValueError(f"cross_entropy: chain must be one of {', '.join(LOSS_CHAINS)} or None, got {chain!r}")
    if fused and chain is not None:
        raise ValueError("cross_entropy: fused and a chain exclude each other (one kernel, or a chain of them)")
    if fused:
        lse = FP32_BYTES * r
        return dict(
            op_class=OpClass.REDUCTION, flops=pc(5 * n + r, 3 * n), act_read=pc(n, n), act_write=pc(0, n),
            fixed_write_bytes=pc(2 * lse), fixed_read_bytes=pc(targets, lse + targets),
            saved=Saved(act=n, fixed_bytes=lse + targets), shapes=((r, c),), out_shape=(1,), tp_split="vocab",
            attrs=attrs_of(fused=True),
        )
    logp = FP32_BYTES * n
    out = dict(
        op_class=OpClass.REDUCTION, flops=pc(5 * n + r, 3 * n), act_read=pc(n, n), act_write=pc(0, 2 * n),
        fixed_write_bytes=pc(logp + FP32_BYTES * r), fixed_read_bytes=pc(targets, logp + targets),
        saved=Saved(fixed_bytes=logp + targets), shapes=((r, c),), out_shape=(1,), tp_split="vocab",
        runs_in_low_precision=False, attrs=attrs_of(log_softmax_bytes=logp),
    )
    if chain is not None:
        kernels, (rd, wr), (frd, fwr) = LOSS_CHAINS[chain]
        row_read = FP32_BYTES * r + targets  # the loss's gather: one fp32 value and one target a row
        out.update(act_read=pc(rd[0] * n, rd[1] * n), act_write=pc(wr[0] * n, wr[1] * n),
                   fixed_read_bytes=pc(frd[0] * n + row_read, frd[1] * n + targets),
                   fixed_write_bytes=pc(fwr[0] * n + FP32_BYTES * r, fwr[1] * n),
                   attrs=attrs_of(log_softmax_bytes=logp, chain=chain, aten_kernels=pc(*kernels)))
    return out


@rule("cross_entropy_metric")
def cross_entropy_metric(*, rows: int, classes: int, calls: int = 1) -> dict:
    """``calls`` forward-only cross-entropies of ``rows`` × ``classes`` logits per sample, outside autograd
    (PyTorch ``CrossEntropyLoss(reduction="sum")`` under autocast, as torchmetrics-style train metrics run
    it): per call and logit the activation-dtype read, the fp32 upcast written (4 B), read and written again
    by ``log_softmax`` (4 + 4 B); per row the gathered log-probability (4 B) and the int64 target."""
    r, c, k = pos_int("rows", rows), pos_int("classes", classes), pos_int("calls", calls)
    n = r * c * k
    return dict(
        op_class=OpClass.REDUCTION, flops=pc(5 * n + r * k), act_read=pc(n), act_write=pc(0),
        fixed_write_bytes=pc(2 * FP32_BYTES * n + FP32_BYTES * k),
        fixed_read_bytes=pc(FP32_BYTES * n + (FP32_BYTES + INDEX_BYTES) * r * k),
        shapes=((r, c),), out_shape=(1,), tp_split="vocab", runs_in_low_precision=False,
        attrs=attrs_of(calls=k),
    )
