"""One transformer layer as a :class:`~simtrain.graph.builders.common.Part` (pre-LN, post-LN or
parallel-residual; dense or MoE FFN), shared by the text and vision builders.

Op names inside a layer block ``layers.i``::

    attn/norm  attn/qkv  [attn/q_norm attn/k_norm]  [attn/rope]  attn/core  attn/proj  [attn/drop]  attn/add
    attn/norm  attn/q_a attn/q_a_norm attn/q_b  attn/kv_a attn/kv_a_norm attn/kv_b  attn/rope  attn/core
               attn/proj  attn/add                                        (MLA: builders/mla.py)
    mlp/norm   mlp/fc1   mlp/act      mlp/fc2    [mlp/drop]  mlp/add        (dense FFN)
    mlp/norm   mlp/router  mlp/experts  [mlp/shared_fc1 mlp/shared_act mlp/shared_fc2 mlp/shared_add]
               [mlp/drop]  mlp/add                                        (MoE FFN [+ shared expert])

Tensor-parallel splits follow Megatron-LM (Shoeybi et al. 2019 §3): QKV and fc1 column-wise, the
attention core by heads, the out-projection and fc2 row-wise; norms, dropout and adds are on the
residual stream ("sequence": split only under sequence parallelism, Korthikanti et al. 2022 §4.2).
The QKV projection is one fused matmul (out = (heads + 2·kv_heads)·head_dim) and the swiglu fc1
one matmul producing gate and up, as in Megatron-LM: the same FLOPs and bytes as separate ones,
and PyTorch keeps their shared input once.

QK-norm (Qwen3, HF ``Qwen3Attention``: ``q_norm`` / ``k_norm`` RMSNorm over head_dim; Llama 4
``use_qk_norm``: a weightless L2 norm) normalises each head of Q and K: rows = tokens × heads, width
head_dim, split with the heads under TP. An MoE layer's routed experts have width
``moe.ffn_hidden`` (HF ``moe_intermediate_size``); a shared expert (DeepSeekMoE, Dai et al. 2024
§3.2; Llama 4 ``Llama4TextMoe.shared_expert``) is a dense gated FFN beside them, split like the dense
FFN under TP, whose output is added to the experts' combined output.
"""

from __future__ import annotations

from simtrain.graph.builders.common import IN, Part, PartBuilder
from simtrain.graph.builders.mla import mla_attention
from simtrain.graph.spec import TransformerArch

__all__ = ["layer_part", "add_layer", "norm", "is_moe_layer"]


def norm(pb: PartBuilder, t: TransformerArch, local: str, rows: int, inputs: tuple[str, ...] | None = None) -> str:
    """The architecture's norm over ``rows`` × hidden (LayerNorm keeps its bias only with biases)."""
    params = {"rows": rows, "width": t.hidden}
    if t.norm == "layernorm":
        params["bias"] = t.biases
    elif t.norm == "rmsnorm":
        params["eager_fp32"] = t.eager_norm_fp32
    return pb.add(t.norm, local, inputs=inputs, **params)


def _qk_norm(pb: PartBuilder, t: TransformerArch, s: int, qkv: str) -> tuple[str, ...]:
    """Per-head norms of Q (s·heads rows) and K (s·kv_heads rows) of width head_dim; ``l2`` has no
    weight. Split by heads under TP (the head_dim weight is in fact replicated: ≤ 256 elements)."""
    d, affine = t.head_dim_n, t.qk_norm == "rmsnorm"
    q = pb.add("rmsnorm", "attn/q_norm", inputs=(qkv,), rows=s * t.heads, width=d, affine=affine, tp_split="heads",
               eager_fp32=t.eager_norm_fp32)
    k = pb.add("rmsnorm", "attn/k_norm", inputs=(qkv,), rows=s * t.kv_heads_n, width=d, affine=affine,
               tp_split="heads", eager_fp32=t.eager_norm_fp32)
    return (q, k)


def _attention(pb: PartBuilder, t: TransformerArch, s: int, src: str) -> str:
    if t.mla is not None:
        return mla_attention(pb, t, s, src)
    a, kv, d = t.heads, t.kv_heads_n, t.head_dim_n
    qkv = pb.add("linear", "attn/qkv", inputs=(src,), rows=s, in_features=t.hidden,
                 out_features=(a + 2 * kv) * d, bias=t.qkv_bias_b, tp_split="column")
    core_in: tuple[str, ...] = (qkv,)
    if t.qk_norm != "none":
        core_in = (*_qk_norm(pb, t, s, qkv), qkv)
    if t.position == "rotary":
        rope = pb.add("rotary", "attn/rope", inputs=core_in[:-1] or None, seq=s, heads=a, kv_heads=kv, head_dim=d,
                      rotary_dim=int(d * t.rotary_fraction), eager_fp32=t.eager_rotary_fp32,
                      rotation_matrix=t.eager_rotary_matrix)
        core_in = (rope, qkv)
    pb.add("attention", "attn/core", inputs=core_in, heads=a, kv_heads=kv, head_dim=d, seq=s,
           causal=t.causal, fused=t.flash_attention, dropout=t.attention_dropout_p)
    # a fused kernel keeps its output O, which is also the out-projection's input (one storage)
    pb.add("linear", "attn/proj", rows=s, in_features=a * d, out_features=t.hidden, bias=t.biases,
           tp_split="row", input_saved_by="attn/core" if t.flash_attention else None)
    if t.dropout:
        pb.add("dropout", "attn/drop", shape=(s, t.hidden), p=t.dropout)
    return pb.last


def _dense_ffn(pb: PartBuilder, t: TransformerArch, s: int, src: str, f: int | None = None,
               prefix: str = "mlp/") -> str:
    """fc1 → act → fc2 of width ``f`` (None: ffn_hidden) on ``src``; ``prefix`` names the ops."""
    f = f or t.ffn_hidden_n
    width = 2 * f if t.activation == "swiglu" else f
    pb.add("linear", f"{prefix}fc1", inputs=(src,), rows=s, in_features=t.hidden, out_features=width,
           bias=t.biases, tp_split="column")
    if t.activation == "swiglu":
        pb.add("swiglu", f"{prefix}act", shape=(s, f), fused=t.fused_activation)
    else:
        pb.add(t.activation, f"{prefix}act", shape=(s, f))
    # relu keeps its output, which is fc2's input: one storage, counted by the relu
    pb.add("linear", f"{prefix}fc2", rows=s, in_features=f, out_features=t.hidden, bias=t.biases, tp_split="row",
           input_saved_by=f"{prefix}act" if t.activation == "relu" else None)
    return pb.last


def _moe_ffn(pb: PartBuilder, t: TransformerArch, s: int, src: str) -> str:
    m = t.moe
    router = pb.add("moe_router", "mlp/router", inputs=(src,), rows=s, hidden=t.hidden, experts=m.experts,
                    top_k=m.top_k, capacity_factor=m.capacity_factor)
    experts = pb.add("moe_experts", "mlp/experts", inputs=(src, router), rows=s, hidden=t.hidden,
                     ffn_hidden=t.moe_ffn_hidden_n, experts=m.experts, top_k=m.top_k,
                     capacity_factor=m.capacity_factor, activation=t.activation, bias=t.biases)
    if m.shared_experts:  # y = Σ_routed g·E(x) + S(x) (DeepSeek-V3 eq. 12; HF Llama4TextMoe.forward)
        shared = _dense_ffn(pb, t, s, src, t.shared_ffn_hidden_n, prefix="mlp/shared_")
        _add(pb, "mlp/shared_add", s, t.hidden, experts, shared)
    return pb.last


def _ffn(pb: PartBuilder, t: TransformerArch, s: int, src: str, moe: bool) -> str:
    (_moe_ffn if moe else _dense_ffn)(pb, t, s, src)
    if t.dropout:
        pb.add("dropout", "mlp/drop", shape=(s, t.hidden), p=t.dropout)
    return pb.last


def _add(pb: PartBuilder, local: str, s: int, h: int, a: str, b: str) -> str:
    return pb.add("add", local, inputs=(a, b), shape=(s, h))


def layer_part(t: TransformerArch, s: int, *, moe: bool = False, block: str = "layers.0") -> Part:
    """One layer on ``s`` tokens per sample."""
    pb = PartBuilder(block)
    add_layer(pb, t, s, moe=moe)
    return pb.build()


def add_layer(pb: PartBuilder, t: TransformerArch, s: int, *, moe: bool = False, src: str = IN) -> str:
    """Append one layer's ops to ``pb`` reading ``src`` (IN: the block input); returns its exit.
    The multi-token-prediction block (transformer.py) puts a layer after its own projection."""
    h = t.hidden
    if t.norm_position == "post":                       # BERT: x = LN(x + f(x))
        attn = _attention(pb, t, s, src)
        res = _add(pb, "attn/add", s, h, attn, src)
        ln1 = norm(pb, t, "attn/norm", s, inputs=(res,))
        mlp = _ffn(pb, t, s, ln1, moe)
        res2 = _add(pb, "mlp/add", s, h, mlp, ln1)
        norm(pb, t, "mlp/norm", s, inputs=(res2,))
    elif t.parallel_residual:                           # GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x)
        attn = _attention(pb, t, s, norm(pb, t, "attn/norm", s, inputs=(src,)))
        mlp = _ffn(pb, t, s, norm(pb, t, "mlp/norm", s, inputs=(src,)), moe)
        both = _add(pb, "attn/add", s, h, attn, mlp)
        _add(pb, "mlp/add", s, h, both, src)
    else:                                               # pre-LN: x + f(LN x)
        attn = _attention(pb, t, s, norm(pb, t, "attn/norm", s, inputs=(src,)))
        res = _add(pb, "attn/add", s, h, attn, src)
        mlp = _ffn(pb, t, s, norm(pb, t, "mlp/norm", s, inputs=(res,)), moe)
        _add(pb, "mlp/add", s, h, mlp, res)
    return pb.last


def is_moe_layer(t: TransformerArch, i: int) -> bool:
    """Layer ``i`` (0-based) has an MoE FFN: after the first ``moe.first_dense`` layers (DeepSeek-V3
    ``first_k_dense_replace``), every ``moe.every``-th (HF Llama 4 ``moe_layers`` =
    range(step − 1, L, step))."""
    return t.moe is not None and i >= t.moe.first_dense and (i + 1) % t.moe.every == 0
