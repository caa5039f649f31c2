"""Plain (non-residual) CNNs: VGG (Simonyan & Zisserman 2015, torchvision layout) and MobileNet v1
(Howard et al. 2017, depthwise-separable convolutions).

VGG blocks: ``features.{i}`` (one per stage of 3×3 convs ending in a 2×2 max-pool), ``head``
(adaptive average pool to 7×7, fc 25088 → 4096 → 4096 → classes with ReLU and dropout, loss).
VGG-16: 138,357,544 parameters without batch-norm (torchvision ``vgg16``); torchvision keeps the
convolution biases with batch-norm too, and so does this builder.

MobileNet blocks: ``stem`` (3×3/2 conv, BN, ReLU), ``blocks.{i}`` (depthwise 3×3 — groups = channels
— BN, ReLU, pointwise 1×1, BN, ReLU), ``head`` (global average pool, fc, loss). With α = 1 and
1000 classes it has 4,231,976 parameters (Howard et al. Table 1 quotes 4.2 M).
"""

from __future__ import annotations

from simtrain.graph.builders.cnn import Feature, classifier_head, conv_bn_relu
from simtrain.graph.builders.common import IN, Part, PartBuilder, assemble
from simtrain.graph.op import ModelParts
from simtrain.graph.rules import conv_out_size
from simtrain.graph.spec import CnnArch, ModelSpec

__all__ = ["build_vgg", "build_mobilenet", "VGG_STAGES", "MOBILENET_BLOCKS"]

#: depth → convolutions per stage (channels 64, 128, 256, 512, 512), torchvision cfgs A, B, D, E
VGG_STAGES = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
#: (output channels, stride) of the 13 depthwise-separable blocks (Howard et al. 2017, Table 1)
MOBILENET_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
                    (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def _vgg_stage(i: int, x: Feature, channels: int, convs: int, c: CnnArch) -> tuple[Part, Feature]:
    pb = PartBuilder(f"features.{i}")
    y = Feature(IN, x.channels, x.size, x.kept_by)
    for j in range(convs):
        y = conv_bn_relu(pb, str(j + 1), y, channels, 3, bn=c.batch_norm, bias=True,
                         input_grad=not (i == 0 and j == 0))
    pb.add("maxpool2d", "pool", channels=channels, input_size=(y.size, y.size), kernel_size=2, stride=2,
           input_saved_by=y.kept_by)
    return pb.build(), Feature("pool", channels, conv_out_size(y.size, 2, 2))


def _vgg_head(x: Feature, c: CnnArch) -> Part:
    pb = PartBuilder("head")
    pb.add("adaptive_avgpool2d", "pool", inputs=(IN,), channels=x.channels, input_size=(x.size, x.size),
           output_size=(7, 7))
    width = x.channels * 49
    for j, out in enumerate((4096, 4096), start=1):
        shared = None if (c.dropout or j == 1) else f"relu{j - 1}"   # relu keeps its output = fc input
        pb.add("linear", f"fc{j}", rows=1, in_features=width, out_features=out, bias=True, input_saved_by=shared)
        pb.add("relu", f"relu{j}", shape=(out,))
        if c.dropout:
            pb.add("dropout", f"drop{j}", shape=(out,), p=c.dropout)
        width = out
    pb.add("linear", "fc3", rows=1, in_features=width, out_features=c.classes, bias=True,
           input_saved_by=None if c.dropout else "relu2")
    pb.add("cross_entropy", "loss", rows=1, classes=c.classes)
    return pb.build()


def build_vgg(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of a VGG classifier (per image)."""
    c = spec.cnn
    x = Feature(IN, c.channels, c.image_size)
    parts = []
    for i, (convs, channels) in enumerate(zip(VGG_STAGES[c.depth], (64, 128, 256, 512, 512), strict=True)):
        part, x = _vgg_stage(i, x, channels, convs, c)
        parts.append(part)
    parts.append(_vgg_head(x, c))
    meta = {"family": spec.family, "published_params": spec.published_params, "arch": "vgg", "depth": c.depth}
    return assemble(spec.name, parts, arch=spec, seq_len=None, meta=meta)


def _width(channels: int, alpha: float) -> int:
    return max(8, int(channels * alpha))


def build_mobilenet(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of MobileNet v1 at width multiplier α (per image)."""
    c = spec.cnn
    pb = PartBuilder("stem")
    x = conv_bn_relu(pb, "", Feature(IN, c.channels, c.image_size), _width(32, c.width_multiplier), 3, 2,
                     input_grad=False)
    parts = [pb.build()]
    x = Feature(IN, x.channels, x.size, kept_by=f"stem/{x.kept_by}")
    for i, (out, stride) in enumerate(MOBILENET_BLOCKS):
        pb = PartBuilder(f"blocks.{i}")
        y = conv_bn_relu(pb, "_dw", x, x.channels, 3, stride, groups=x.channels)
        y = conv_bn_relu(pb, "_pw", y, _width(out, c.width_multiplier), 1)
        parts.append(pb.build())
        x = Feature(IN, y.channels, y.size, kept_by=f"blocks.{i}/{y.kept_by}")
    parts.append(classifier_head(x, c.classes))
    meta = {"family": spec.family, "published_params": spec.published_params, "arch": "mobilenet"}
    return assemble(spec.name, parts, arch=spec, seq_len=None, meta=meta)
