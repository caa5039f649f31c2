"""Convolutional classifiers: ResNet (He et al. 2016, torchvision "v1.5": the stride sits on the 3×3
of a bottleneck), and the shared conv → batch-norm → ReLU helper used by VGG and MobileNet
(:mod:`~simtrain.graph.builders.cnn_plain`).

Blocks: ``stem`` (7×7/2 conv, BN, ReLU, 3×3/2 max-pool), ``layer{1..4}.{j}`` (one residual block
each), ``head`` (global average pool, fc, cross-entropy).

Saved-tensor sharing (what PyTorch holds once): the ReLUs are in place and keep their output, which
is also the next convolution's (or max-pool's) input, so those ops mark ``input_saved_by`` the ReLU;
a downsample 1×1 convolution reads the same block input as ``conv1`` and marks it likewise. The
global average pool is a mean in ATen and keeps nothing.

Parameter counts (torchvision, 1000 classes): ResNet-18 11,689,512; ResNet-50 25,557,032;
ResNet-152 60,192,808.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.graph.builders.common import IN, Part, PartBuilder, assemble
from simtrain.graph.op import ModelParts
from simtrain.graph.rules import conv_out_size
from simtrain.graph.spec import CnnArch, ModelSpec

__all__ = ["build_resnet", "Feature", "conv_bn_relu", "classifier_head", "RESNET_LAYOUT"]

#: depth → (block kind, blocks per stage)
RESNET_LAYOUT = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
                 101: ("bottleneck", (3, 4, 23, 3)), 152: ("bottleneck", (3, 8, 36, 3))}


@dataclass(frozen=True, slots=True)
class Feature:
    """A feature map flowing between ops: which op made it (local name or IN), its channels and
    spatial size, and which op (full or local name) already keeps it for backward (None: nobody)."""

    src: str
    channels: int
    size: int
    kept_by: str | None = None


def conv_bn_relu(pb: PartBuilder, tag: str, x: Feature, c_out: int, k: int, stride: int = 1, *,
                 relu: bool = True, groups: int = 1, bn: bool = True, bias: bool = False,
                 input_grad: bool = True) -> Feature:
    """conv (k×k, padding k//2) → batch-norm → in-place ReLU, named ``conv{tag}``, ``bn{tag}``,
    ``relu{tag}``; returns the output feature."""
    pad = k // 2
    conv = pb.add("conv2d", f"conv{tag}", inputs=(x.src,), in_channels=x.channels, out_channels=c_out,
                  kernel_size=k, stride=stride, padding=pad, groups=groups, input_size=(x.size, x.size),
                  bias=bias, input_grad=input_grad, input_saved_by=x.kept_by, tp_split="replicate")
    size = conv_out_size(x.size, k, stride, pad)
    out = Feature(conv, c_out, size, kept_by=None)
    if bn:
        out = Feature(pb.add("batchnorm", f"bn{tag}", channels=c_out, spatial=(size, size)), c_out, size)
    if relu:
        name = pb.add("relu", f"relu{tag}", shape=(c_out, size, size), tp_split="replicate")
        out = Feature(name, c_out, size, kept_by=name)
    return out


def _residual_block(block: str, kind: str, x: Feature, width: int, stride: int) -> tuple[Part, Feature]:
    pb = PartBuilder(block)
    first = Feature(IN, x.channels, x.size, x.kept_by)
    if kind == "basic":
        y = conv_bn_relu(pb, "1", first, width, 3, stride)
        y = conv_bn_relu(pb, "2", y, width, 3, relu=False)
        c_out = width
    else:
        y = conv_bn_relu(pb, "1", first, width, 1)
        y = conv_bn_relu(pb, "2", y, width, 3, stride)
        y = conv_bn_relu(pb, "3", y, 4 * width, 1, relu=False)
        c_out = 4 * width
    skip = IN
    if stride != 1 or x.channels != c_out:
        # the block input is already kept by conv1 (or by the previous block's ReLU)
        shared = Feature(IN, x.channels, x.size, x.kept_by or "conv1")
        skip = conv_bn_relu(pb, "_down", shared, c_out, 1, stride, relu=False).src
    pb.add("add", "add", inputs=(y.src, skip), shape=(c_out, y.size, y.size), tp_split="replicate")
    relu = pb.add("relu", "relu", shape=(c_out, y.size, y.size), tp_split="replicate")
    return pb.build(), Feature(relu, c_out, y.size, kept_by=f"{block}/{relu}")


def _stem(c: CnnArch) -> tuple[Part, Feature]:
    pb = PartBuilder("stem")
    y = conv_bn_relu(pb, "", Feature(IN, c.channels, c.image_size), 64, 7, 2, input_grad=False)
    pb.add("maxpool2d", "pool", channels=64, input_size=(y.size, y.size), kernel_size=3, stride=2, padding=1,
           input_saved_by=y.kept_by)
    size = conv_out_size(y.size, 3, 2, 1)
    return pb.build(), Feature("pool", 64, size, kept_by=None)


def classifier_head(x: Feature, classes: int, *, pool: bool = True) -> Part:
    """Global average pool (a mean: keeps nothing), fc with bias, cross-entropy (one row per image)."""
    pb = PartBuilder("head")
    if pool:
        pb.add("global_avgpool", "pool", inputs=(IN,), channels=x.channels, input_size=(x.size, x.size))
    pb.add("linear", "fc", inputs=None if pb.last else (IN,), rows=1, in_features=x.channels,
           out_features=classes, bias=True)
    pb.add("cross_entropy", "loss", rows=1, classes=classes)
    return pb.build()


def build_resnet(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of a ResNet classifier (per image)."""
    c = spec.cnn
    kind, stages = RESNET_LAYOUT[c.depth]
    stem, x = _stem(c)
    parts = [stem]
    for stage, (count, width) in enumerate(zip(stages, (64, 128, 256, 512), strict=True), start=1):
        for j in range(count):
            stride = 2 if (j == 0 and stage > 1) else 1
            part, x = _residual_block(f"layer{stage}.{j}", kind, x, width, stride)
            parts.append(part)
    parts.append(classifier_head(x, c.classes))
    meta = {"family": spec.family, "published_params": spec.published_params, "arch": "resnet", "depth": c.depth}
    return assemble(spec.name, parts, arch=spec, seq_len=None, meta=meta)
