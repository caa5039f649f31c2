"""Multi-head latent attention (MLA) as ops of a layer block: DeepSeek-V2 (DeepSeek-AI 2024, §2.1,
eqs. 9–19) and DeepSeek-V3 (DeepSeek-AI 2024, §2.1.1), in the non-absorbed form that training runs
(HF ``DeepseekV3Attention.forward``; Megatron-Core ``MLASelfAttention``). With a = heads, h = hidden,
n = ``qk_nope_head_dim``, r = ``qk_rope_head_dim``, v = ``v_head_dim``, s tokens::

    attn/q_a        linear  h → q_lora_rank                 (q_a_proj; replicated under TP)
    attn/q_a_norm   rmsnorm s × q_lora_rank                 (q_a_layernorm; replicated)
    attn/q_b        linear  q_lora_rank → a·(n + r)          (q_b_proj; column)
      — or, without q_lora_rank, attn/q: linear h → a·(n + r) (q_proj; column)
    attn/kv_a       linear  h → kv_lora_rank + r            (kv_a_proj_with_mqa: the latent and the
                                                             one rotary key shared by every head; replicated)
    attn/kv_a_norm  rmsnorm s × kv_lora_rank                (kv_a_layernorm; replicated)
    attn/kv_b       linear  kv_lora_rank → a·(n + v)         (kv_b_proj: per-head keys and values; column)
    attn/rope       rotary  on a query heads and 1 key head of r dims
    attn/core       attention a heads (kv_heads = a), Q/K head dim n + r, V head dim v (heads)
    attn/proj       linear  a·v → h                          (o_proj; row)

Parameters per layer (DeepSeek-V3: h 7168, a 128, q_lora 1536, kv_lora 512, n 128, r 64, v 128):
h·1536 + 1536 + 1536·a·192 + h·576 + 512 + 512·a·256 + a·128·h = 187,107,328. The down-projections
and the latent norms are replicated on every tensor-parallel rank (Megatron-Core builds them with
``parallel_mode="duplicated"``); the up-projections are column-split by heads, the core by heads and
the out-projection row-wise, as in GQA attention.
"""

from __future__ import annotations

from simtrain.graph.builders.common import PartBuilder
from simtrain.graph.spec import TransformerArch

__all__ = ["mla_attention"]


def _latent(pb: PartBuilder, t: TransformerArch, s: int, src: str, name: str, rank: int, extra: int,
            out: int) -> str:
    """h → rank (+ extra, passed through) → norm → out: one low-rank branch; returns the up-projection."""
    pb.add("linear", f"attn/{name}_a", inputs=(src,), rows=s, in_features=t.hidden, out_features=rank + extra,
           bias=False, tp_split="replicate")
    pb.add("rmsnorm", f"attn/{name}_a_norm", rows=s, width=rank, tp_split="replicate", eager_fp32=t.eager_norm_fp32)
    return pb.add("linear", f"attn/{name}_b", rows=s, in_features=rank, out_features=out, bias=False,
                  tp_split="column")


def mla_attention(pb: PartBuilder, t: TransformerArch, s: int, src: str) -> str:
    """MLA on ``src`` (the normed hidden state); returns the out-projection (or its dropout)."""
    m, a = t.mla, t.heads
    qk, v = m.qk_head_dim, m.v_head_dim
    if m.q_lora_rank is None:
        q = pb.add("linear", "attn/q", inputs=(src,), rows=s, in_features=t.hidden, out_features=a * qk,
                   bias=False, tp_split="column")
    else:
        q = _latent(pb, t, s, src, "q", m.q_lora_rank, 0, a * qk)
    kv = _latent(pb, t, s, src, "kv", m.kv_lora_rank, m.qk_rope_head_dim, a * (m.qk_nope_head_dim + v))
    # rotary on the r-dim part of every query head and on the single shared rotary key (kv_a's extra r)
    rope = pb.add("rotary", "attn/rope", inputs=(q, kv), seq=s, heads=a, kv_heads=1, head_dim=m.qk_rope_head_dim,
                  eager_fp32=t.eager_rotary_fp32, rotation_matrix=t.eager_rotary_matrix)
    pb.add("attention", "attn/core", inputs=(rope, q, kv), heads=a, kv_heads=a, head_dim=qk, v_head_dim=v, seq=s,
           causal=t.causal, fused=t.flash_attention, dropout=t.attention_dropout_p)
    pb.add("linear", "attn/proj", rows=s, in_features=a * v, out_features=t.hidden, bias=False, tp_split="row",
           input_saved_by="attn/core" if t.flash_attention else None)
    if t.dropout:
        pb.add("dropout", "attn/drop", shape=(s, t.hidden), p=t.dropout)
    return pb.last
