"""PyTorch's own instruments for one training step, and simtrain's numbers on the same definitions.

* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over forward + loss + backward. It counts only
  the operators in its registry (matmuls, convolutions, attention); simtrain's count on *the same
  operators* is the sum of the per-ATen-operator FLOPs the torch importer records
  (:func:`simtrain.graph.capture.importer.aten_flops`). Two documented disagreements of the counter
  (docs/flop-counter-disagreements.md) are handled the way the importer's tests handle them: the
  CPU flash-attention kernels get the counter's own CUDA formulas (the stock counter says 0), and the
  counter's weight gradient of a grouped convolution, which it multiplies by ``groups``, is corrected
  by exactly that excess — ``(groups − 1) · 2·B·Ho·Wo·Cout·(Cin/groups)·kh·kw`` (He & Sun 2015 §2).
  The report keeps the raw counter value next to the corrected one.
* Saved bytes: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd packs; bytes of
  the distinct storages (by data pointer), parameters and buffers excluded, are what backward holds.
* Peak memory (CUDA): ``torch.cuda.max_memory_allocated`` over one training step after warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.utils.flop_counter as fc

__all__ = ["FlopCount", "counter_flops", "simtrain_counter_flops", "grouped_conv_excess", "hook_saved_bytes",
           "simtrain_saved_bytes", "allocated_bytes", "peak_allocated_bytes"]

_aten = torch.ops.aten
#: the counter's formulas for the CUDA attention kernels, registered for the CPU kernels it lacks.
CPU_ATTENTION = {_aten._scaled_dot_product_flash_attention_for_cpu: fc.sdpa_flop.__wrapped__,
                 _aten._scaled_dot_product_flash_attention_for_cpu_backward: fc.sdpa_backward_flop.__wrapped__}


@dataclass(frozen=True)
class FlopCount:
    raw: int
    """What the counter says (with the CPU attention formulas registered)."""
    grouped_conv_excess: int
    by_packet: dict[str, int]

    @property
    def corrected(self) -> int:
        return self.raw - self.grouped_conv_excess


def _packet_name(p) -> str:
    """``aten::mm`` → ``mm``; higher-order operators (flex attention) have a plain name."""
    return str(getattr(p, "_qualified_op_name", getattr(p, "__name__", p))).split("::")[-1]


def counter_flops(module: nn.Module, inputs: tuple, loss_fn) -> FlopCount:
    """FlopCounterMode over one step (forward, loss, backward); gradients cleared afterwards."""
    with torch.random.fork_rng(devices=[]):
        with fc.FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as mode:
            loss_fn(module(*inputs)).backward()
    module.zero_grad(set_to_none=True)
    packets = {_packet_name(p): int(n) for p, n in mode.get_flop_counts().get("Global", {}).items()}
    return FlopCount(int(mode.get_total_flops()), grouped_conv_excess(module, inputs), packets)


def _registered_names() -> set[str]:
    names = {_packet_name(p) for p in fc.FlopCounterMode().flop_registry}
    return names | {_packet_name(p) for p in CPU_ATTENTION}


def simtrain_counter_flops(model, batch: int) -> float:
    """simtrain's FLOPs of one step at ``batch`` over the operators the counter counts."""
    from simtrain.graph.capture.importer import aten_flops
    known = _registered_names()
    return float(sum(f for (name, _), f in aten_flops(model, batch).items() if name in known))


def grouped_conv_excess(module: nn.Module, inputs: tuple) -> int:
    """(groups − 1) × the weight-gradient FLOPs of every grouped Conv2d (see module docstring)."""
    excess, hooks = [0], []

    def hook(conv, _inp, out):
        if conv.groups > 1:
            b, c_out, ho, wo = out.shape
            kh, kw = conv.kernel_size
            wgrad = 2 * b * ho * wo * c_out * (conv.in_channels // conv.groups) * kh * kw
            excess[0] += (conv.groups - 1) * wgrad
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return excess[0]


def hook_saved_bytes(module: nn.Module, inputs: tuple, loss_fn) -> int:
    """Bytes of the distinct storages autograd saves in one forward + loss (params and buffers excluded)."""
    state = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    seen: dict[int, int] = {}
    alive = []  # keep each saved storage alive so its address is not reused by a later tensor

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in state and ptr not in seen:
            seen[ptr] = t.untyped_storage().nbytes()
            alive.append(t)
        return t
    with torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(module(*inputs))
    return sum(seen.values())


def simtrain_saved_bytes(model, batch: int, precision: str = "fp32") -> float:
    """Bytes simtrain's op records keep for backward at ``batch``: per-sample saved × batch through
    the estimator's own rule (:func:`simtrain.cost.op_cost.saved_bytes`) plus the per-batch statistics
    (batch-norm means and variances) that do not scale with the batch."""
    from simtrain.cost.op_cost import saved_bytes
    from simtrain.cost.precision import regime
    reg = regime(precision)
    per_batch = sum(float(op.attr("stats_bytes_per_batch", 0.0) or 0.0) for op in model.ops)
    return sum(saved_bytes(op, batch, reg) for op in model.ops) + per_batch


def allocated_bytes(device: str) -> int:
    """Bytes the process holds on the GPU now (torch.cuda.memory_allocated, after a garbage collection
    and with the allocator's cache released); 0 off CUDA."""
    if device != "cuda":
        return 0
    import gc
    # a GEMM first: cuBLAS takes its workspace from the caching allocator on a stream's first GEMM and
    # keeps it, so the first model timed would otherwise count it (run 2: the MLP's 88 MiB against 22)
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()
    del a
    gc.collect()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated())


def peak_allocated_bytes(step, device: str, baseline_bytes: int = 0) -> int | None:
    """torch.cuda.max_memory_allocated over one call of ``step``, less ``baseline_bytes`` (what the
    process held before the model was built: earlier models' tensors that are still alive belong to
    none of this step); None off CUDA."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated()) - baseline_bytes
