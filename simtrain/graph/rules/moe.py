"""Mixture-of-experts: ``moe_router`` (gating) and ``moe_experts`` (the expert FFNs).

Counting follows the tokens actually routed (Fedus et al. 2021, Switch Transformer §2; Jiang et al.
2024, Mixtral): every token goes to ``top_k`` experts, so the expert FLOPs are those of ``top_k``
dense FFNs per token, while the parameters are those of all ``experts``. The capacity factor (the
padded capacity of each expert, GShard / Switch) is recorded in ``MoEInfo`` for the cost layer; it
does not change the model FLOPs.

``moe_router``: logits = x·W_r (h × E, no bias), softmax, top-k. FLOPs are the matmul only
(2·T·h·E per phase, as ``linear``); softmax/top-k are memory-bound bytes. Saved: the input
(for dW_r), the fp32 routing probabilities (``softmax(..., dtype=float)`` as in Mixtral), and the
int64 expert indices of the top-k.

``moe_experts``: per routed token an FFN h → f → h (``activation`` gelu/relu: 2 matrices;
swiglu: 3). FLOPs are the expert matmuls (one FMA = 2): forward 2·T·k·h·f·M with M matrices, and
the same for agrad and wgrad; the activation and the weighted combine are bytes, not FLOPs (as in
``attention``). Saved, for a dropless token-permutation implementation: the dispatched tokens
(T·k·h, for dW1), the activation's saved tensors (swiglu: fc1 output 2f + silu output f; gelu: its
input f; relu: its output f), the fc2 input (f; the relu output itself for relu), the expert
outputs for the weighted combine (T·k·h) and the combine weights (T·k).
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.op import Gemm, MoEInfo, Saved
from simtrain.graph.rules._util import attrs_of, pc, pos_int
from simtrain.graph.rules.registry import rule

__all__ = ["moe_router", "moe_experts", "EXPERT_MATRICES"]

INDEX_BYTES = 8
FP32_BYTES = 4
#: matrices per expert FFN, and elements kept by activation + fc2 input per routed token (× f)
EXPERT_MATRICES = {"gelu": 2, "gelu_tanh": 2, "relu": 2, "relu2": 2, "swiglu": 3}
_ACT_SAVED = {"gelu": 2, "gelu_tanh": 2, "relu": 1, "relu2": 2, "swiglu": 4}


def _moe_info(experts, top_k, capacity_factor) -> MoEInfo:
    e, k = pos_int("experts", experts), pos_int("top_k", top_k)
    if k > e:
        raise ValueError(f"top_k={k} exceeds experts={e}")
    if not capacity_factor > 0:
        raise ValueError(f"capacity_factor must be positive, got {capacity_factor!r}")
    return MoEInfo(experts=e, top_k=k, capacity_factor=float(capacity_factor))


@rule("moe_router")
def moe_router(*, rows: int, hidden: int, experts: int, top_k: int, capacity_factor: float = 1.0) -> dict:
    """Top-k gating of ``rows`` tokens per sample over ``experts``."""
    info = _moe_info(experts, top_k, capacity_factor)
    t, h, e, k = pos_int("rows", rows), pos_int("hidden", hidden), info.experts, info.top_k
    fl = 2 * t * h * e
    probs, idx = FP32_BYTES * t * e, INDEX_BYTES * t * k
    return dict(
        op_class=OpClass.MATMUL, flops=pc(fl, fl, fl),
        act_read=pc(t * h, t * k, t * h + t * e), act_write=pc(t * k, t * h, 0),
        fixed_write_bytes=pc(probs + idx, probs), fixed_read_bytes=pc(probs, probs + idx, 0),
        weight_read=pc(h * e, h * e, h * e), weight_write=pc(0, 0, h * e), param_count=h * e,
        saved=Saved(act=t * h, fixed_bytes=probs + idx), shapes=((t, h),), out_shape=(t, k),
        gemm=Gemm(m=t, n=e, k=h), tp_split="replicate", moe=info,
        attrs=attrs_of(saved_input_elements=t * h),
    )


def _expert_traffic(t: int, routed: int, h: int, f: int, fc1_out: int):
    """Elements read / written per phase: dispatch (t·h → routed·h), fc1 (h → fc1_out), activation
    (fc1_out → f), fc2 (f → h), weighted combine (routed·h + weights → t·h); backward mirrors it."""
    fw_read = t * h + routed * (h + fc1_out + f + h + 1)
    fw_write = routed * (h + fc1_out + f + h) + t * h
    ag_read = t * h + routed * (h + h + f + 2 * fc1_out + h)
    ag_write = routed * (h + 1 + f + fc1_out + h) + t * h
    wg_read = routed * (h + f + fc1_out + h)
    return pc(fw_read, ag_read, wg_read), pc(fw_write, ag_write, 0)


@rule("moe_experts")
def moe_experts(*, rows: int, hidden: int, ffn_hidden: int, experts: int, top_k: int,
                capacity_factor: float = 1.0, activation: str = "swiglu", bias: bool = False) -> dict:
    """The expert FFNs of one MoE layer on ``rows`` tokens per sample (each sent to ``top_k``)."""
    info = _moe_info(experts, top_k, capacity_factor)
    if activation not in EXPERT_MATRICES:
        raise ValueError(f"activation must be one of {sorted(EXPERT_MATRICES)}, got {activation!r}")
    t, h, f = pos_int("rows", rows), pos_int("hidden", hidden), pos_int("ffn_hidden", ffn_hidden)
    e, k, mats = info.experts, info.top_k, EXPERT_MATRICES[activation]
    routed = t * k
    fl = 2 * routed * h * f * mats
    fc1_out = f * (2 if activation == "swiglu" else 1)
    per_expert = h * f * mats + ((fc1_out + h) if bias else 0)
    weights = e * per_expert
    saved_act = routed * (h + _ACT_SAVED[activation] * f + h + 1)
    read, write = _expert_traffic(t, routed, h, f, fc1_out)
    return dict(
        op_class=OpClass.MATMUL, flops=pc(fl, fl, fl), act_read=read, act_write=write,
        weight_read=pc(weights, weights, weights), weight_write=pc(0, 0, weights), param_count=weights,
        saved=Saved(act=saved_act), shapes=((t, h),), out_shape=(t, h),
        gemm=Gemm(m=max(1, routed // e), n=f, k=h, batch=e), tp_split="expert", moe=info,
        attrs=attrs_of(activation=activation, params_per_expert=per_expert, routed_tokens=routed),
    )
