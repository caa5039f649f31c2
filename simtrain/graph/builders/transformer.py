"""Text transformers (GPT, Llama, BERT, Mixtral, …): blocks ``embed``, ``layers.0`` … ``layers.{L-1}``,
``head``.

* ``embed``: token embedding (vocab-split under TP), learned positions and token types
  (replicated), their adds, BERT's embedding LayerNorm (post-LN models), embedding dropout.
* ``layers.i``: :func:`~simtrain.graph.builders.layers.layer_part`, built once per kind (dense / MoE)
  and copied, so every layer is the same records under another name.
* ``head``: ``lm`` — final norm (pre-LN), LM head (tied to ``embed/tok`` when
  ``tied_embeddings``: its weight is counted once, Megatron-LM style), cross-entropy over the vocab;
  ``mlm`` — BERT's transform (dense, GELU, LayerNorm), the tied decoder with its own bias, loss.

* ``mtp1`` … (``mtp_modules``, DeepSeek-V3 §2.2 multi-token prediction): after the head, one block
  per depth k: ``hnorm`` (RMSNorm of the hidden state), ``emb`` (the tokens k ahead, a lookup tied to
  ``embed/tok``) and ``enorm``, ``proj`` (the 2h → h matrix M_k on their concatenation), one layer
  of the last layer's kind (``attn/…``, ``mlp/…``), ``norm``, ``lm_head`` (tied to the head's) and
  ``loss``. Its input is the main model's last hidden state (the graph's chain edge comes from the
  head; the partitioner keeps blocks after the layers on the last pipeline stage, as DeepSeek-V3 did).

Parameter counts follow from the ops; e.g. a GPT layer has 12h² + 13h parameters (Narayanan et al.
2021, §5.1: QKV 3h² + 3h, proj h² + h, fc1 4h² + 4h, fc2 4h² + h, two LayerNorms 4h).
"""

from __future__ import annotations

from simtrain.graph.builders.common import IN, Part, PartBuilder, assemble, relocate
from simtrain.graph.builders.layers import add_layer, is_moe_layer, layer_part, norm
from simtrain.graph.op import ModelParts
from simtrain.graph.spec import ModelSpec, TransformerArch

__all__ = ["build_transformer", "embed_part", "head_part", "layer_parts", "mtp_part"]


def embed_part(t: TransformerArch, s: int) -> Part:
    """Token (+ position, + token-type) embeddings of ``s`` tokens, then norm (post-LN) and dropout."""
    pb, h = PartBuilder("embed"), t.hidden
    x = pb.add("embedding", "tok", inputs=(IN,), num=t.vocab, dim=h, rows=s)
    if t.position == "learned":
        pos = pb.add("embedding", "pos", inputs=(IN,), num=t.max_positions or s, dim=h, rows=s, tp_split="replicate")
        x = pb.add("add", "pos_add", inputs=(x, pos), shape=(s, h))
    if t.token_types:
        typ = pb.add("embedding", "type", inputs=(IN,), num=t.token_types, dim=h, rows=s, tp_split="replicate")
        x = pb.add("add", "type_add", inputs=(x, typ), shape=(s, h))
    if t.norm_position == "post":
        norm(pb, t, "norm", s, inputs=(x,))
    if t.dropout:
        pb.add("dropout", "drop", shape=(s, h), p=t.dropout)
    return pb.build()


def layer_parts(t: TransformerArch, s: int) -> list[Part]:
    """The L layer blocks; one template per layer kind, relocated to ``layers.i``."""
    templates: dict[bool, Part] = {}
    parts = []
    for i in range(t.layers):
        moe = is_moe_layer(t, i)
        if moe not in templates:
            templates[moe] = layer_part(t, s, moe=moe)
        parts.append(relocate(templates[moe], f"layers.{i}"))
    return parts


def head_part(t: TransformerArch, s: int, tied_to: str = "embed/tok") -> Part:
    """The LM or MLM head with the loss over ``s`` positions."""
    pb, h = PartBuilder("head"), t.hidden
    tie = tied_to if t.tied_embeddings else None
    if t.head == "mlm":
        pb.add("linear", "transform", inputs=(IN,), rows=s, in_features=h, out_features=h, bias=t.biases)
        pb.add("gelu", "act", shape=(s, h), tp_split="replicate")
        norm(pb, t, "norm", s)
        pb.add("linear", "decoder", rows=s, in_features=h, out_features=t.vocab, bias=True, tied_to=tie,
               tp_split="vocab")
    else:
        if t.norm_position == "pre":
            norm(pb, t, "norm", s, inputs=(IN,))
        pb.add("linear", "lm_head", inputs=None if pb.last else (IN,), rows=s, in_features=h,
               out_features=t.vocab, bias=False, tied_to=tie, tp_split="vocab")
    logits = pb.last
    loss = pb.add("cross_entropy", "loss", rows=s, classes=t.vocab, fused=t.fused_cross_entropy,
                  chain=t.loss_chain)
    if t.metric_cross_entropies:
        pb.add("cross_entropy_metric", "metrics", inputs=(logits,), rows=s, classes=t.vocab,
               calls=t.metric_cross_entropies)
    return pb.build(exit=loss)


def mtp_part(t: TransformerArch, s: int, depth: int) -> Part:
    """Multi-token-prediction module ``depth`` (DeepSeek-V3 §2.2, eqs. 21–23; HF checkpoint layer 61:
    ``enorm``, ``hnorm``, ``eh_proj``, a decoder layer, ``shared_head.norm``): h'_i = M_k [RMSNorm(h_i);
    RMSNorm(Emb(t_{i+k}))], one layer, the shared output head and a cross-entropy on s tokens."""
    pb, h = PartBuilder(f"mtp{depth}"), t.hidden
    hid = norm(pb, t, "hnorm", s, inputs=(IN,))
    emb = pb.add("embedding", "emb", inputs=(IN,), num=t.vocab, dim=h, rows=s, tied_to="embed/tok")
    emb = norm(pb, t, "enorm", s, inputs=(emb,))
    # M_k: 2h → h, row-split under TP (its reduce-scatter returns the sequence-parallel residual)
    proj = pb.add("linear", "proj", inputs=(emb, hid), rows=s, in_features=2 * h, out_features=h, bias=False,
                  tp_split="row")
    add_layer(pb, t, s, moe=is_moe_layer(t, t.layers - 1), src=proj)
    norm(pb, t, "norm", s)
    pb.add("linear", "lm_head", rows=s, in_features=h, out_features=t.vocab, bias=False, tied_to="head/lm_head",
           tp_split="vocab")
    pb.add("cross_entropy", "loss", rows=s, classes=t.vocab, fused=t.fused_cross_entropy,
           chain=t.loss_chain)
    return pb.build()


def build_transformer(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of a text transformer at ``spec.seq_len`` tokens per sample."""
    t, s = spec.transformer, spec.seq_len
    parts = [embed_part(t, s), *layer_parts(t, s)]
    if t.head != "none":
        parts.append(head_part(t, s))
    parts += [mtp_part(t, s, k) for k in range(1, t.mtp_modules + 1)]
    # head_dim: the mean of the Q/K and V head dims (MLA), so that 12·L·H·Q·T (PaLM) is the attention
    meta = {"family": spec.family, "published_params": spec.published_params, "layers": t.layers,
            "hidden": t.hidden, "heads": t.heads, "head_dim": (t.head_dim_n + t.v_head_dim_n) // 2}
    if t.mtp_modules:
        meta["mtp_modules"] = t.mtp_modules
    return assemble(spec.name, parts, arch=spec, seq_len=s, rebuild=rebuild, meta=meta)
