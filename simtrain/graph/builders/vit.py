"""Vision Transformer (Dosovitskiy et al. 2021): blocks ``embed``, ``layers.i``, ``head``.

``embed``: the patch projection — a p × p convolution with stride p on the image (no input
gradient: the image is data) — the class token (a learned row concatenated in front), the learned
position embedding (a learned add over the N + 1 tokens), dropout. The layers are the text
transformer's (:mod:`~simtrain.graph.builders.layers`), bidirectional. ``head``: final norm over
all tokens, then a linear classifier on the class token and cross-entropy (one row per sample).

ViT-B/16 at 224²: N = 196 patches + 1 class token, 86,567,656 parameters (torchvision ``vit_b_16``).
"""

from __future__ import annotations

from simtrain.graph.builders.common import IN, Part, PartBuilder, assemble
from simtrain.graph.builders.layers import norm
from simtrain.graph.builders.transformer import layer_parts
from simtrain.graph.op import ModelParts
from simtrain.graph.spec import ModelSpec, TransformerArch, VitArch

__all__ = ["build_vit"]


def _embed(v: VitArch, t: TransformerArch) -> Part:
    pb, h = PartBuilder("embed"), t.hidden
    grid = v.image_size // v.patch_size
    patches = grid * grid
    pb.add("conv2d", "patch", inputs=(IN,), in_channels=v.channels, out_channels=h, kernel_size=v.patch_size,
           stride=v.patch_size, input_size=(v.image_size, v.image_size), bias=True, input_grad=False,
           tp_split="replicate")
    if v.class_token:
        pb.add("concat", "cls", rows=(patches,), width=h, learned_rows=1)
    pb.add("add", "pos", shape=(v.tokens, h), learned=True)
    if t.dropout:
        pb.add("dropout", "drop", shape=(v.tokens, h), p=t.dropout)
    return pb.build()


def _head(v: VitArch, t: TransformerArch) -> Part:
    pb = PartBuilder("head")
    norm(pb, t, "norm", v.tokens, inputs=(IN,))
    pb.add("linear", "classifier", rows=1, in_features=t.hidden, out_features=v.classes, bias=True)
    pb.add("cross_entropy", "loss", rows=1, classes=v.classes)
    return pb.build()


def build_vit(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of a ViT classifier (per image)."""
    v, t = spec.vit, spec.transformer
    parts = [_embed(v, t), *layer_parts(t, v.tokens), _head(v, t)]
    meta = {"family": spec.family, "published_params": spec.published_params, "layers": t.layers,
            "hidden": t.hidden, "heads": t.heads, "head_dim": t.head_dim_n, "tokens": v.tokens}
    return assemble(spec.name, parts, arch=spec, seq_len=None, meta=meta)
