"""The *unseen* set: five models added to check that the CPU calibration transfers (issue 12).

No calibration step sees these models: ``st.measure`` / ``st.calibrate`` fit microbenchmarks only,
:mod:`validation.overhead` a synthetic chain of tiny layers; none of the numbers in ``simtrain/`` or
``hardware_specs/`` was chosen while looking at their step times. Their step-time cases carry the
metric ``step_time_unseen`` so the report gives them their own MAPE beside the zoo's.

Each model exercises a path the zoo covers thinly or not at all:

* ``invres`` — MobileNet v2 inverted residuals (Sandler et al. 2018, Table 1 block): 1×1 expand,
  3×3 depthwise, 1×1 linear projection, residual add when shapes match.
* ``resnext`` — ResNeXt bottlenecks (Xie et al. 2017, Fig. 3c): 1×1, 3×3 *grouped* (cardinality 8),
  1×1, residual; projection shortcut when the shape changes.
* ``wide_mlp`` — a wide MLP (two 4096-unit hidden layers, LayerNorm, GELU), trained with Adam.
* ``mha_tf`` — a post-LN encoder built from ``nn.MultiheadAttention`` (the importer splits it into
  its projections and the attention core), mean-pooled classification head.
* ``patch_mixer`` — a ViT-style patch model: patches cut with ``unfold`` and embedded by a Linear
  layer (not a convolution), ``nn.TransformerEncoderLayer`` blocks (pre-LN, GELU), mean pooling.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["InvertedResidualNet", "ResNeXt", "WideMLP", "MHAEncoder", "PatchTransformer", "UNSEEN",
           "UNSEEN_OPTIMIZER", "GROUPED"]


def _bn_act(c: int, act: bool = True) -> list[nn.Module]:
    return [nn.BatchNorm2d(c), nn.ReLU6()] if act else [nn.BatchNorm2d(c)]


class InvertedResidual(nn.Module):
    """Sandler et al. 2018, §3.3: expand ×t (1×1), depthwise 3×3 at ``stride``, linear 1×1 project."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = c_in * expand
        self.body = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), *_bn_act(mid),
                                  nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), *_bn_act(mid),
                                  nn.Conv2d(mid, c_out, 1, bias=False), *_bn_act(c_out, act=False))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class InvertedResidualNet(nn.Module):
    def __init__(self, stem: int, plan: list[tuple[int, int]], expand: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, 2, 1, bias=False), *_bn_act(stem))
        blocks, c = [], stem
        for out, stride in plan:
            blocks.append(InvertedResidual(c, out, stride, expand))
            c = out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class Bottleneck(nn.Module):
    """Xie et al. 2017, Fig. 3(c): 1×1 → grouped 3×3 (``groups``) → 1×1, each with BN; ReLU; shortcut."""

    def __init__(self, c_in: int, width: int, c_out: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNeXt(nn.Module):
    def __init__(self, stem: int, plan: list[tuple[int, int, int]], groups: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU())
        blocks, c = [], stem
        for width, out, stride in plan:
            blocks.append(Bottleneck(c, width, out, stride, groups))
            c = out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class WideMLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, depth: int, classes: int) -> None:
        super().__init__()
        dims = [d_in] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, norm in zip(self.layers, self.norms, strict=True):
            x = F.gelu(norm(layer(x)))
        return self.head(x)


class MHABlock(nn.Module):
    """Post-LN encoder layer (Vaswani et al. 2017, §3.1) around ``nn.MultiheadAttention``."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.drop(self.attn(x, x, x, need_weights=False)[0]))
        return self.ln2(x + self.drop(self.ff(x)))


class MHAEncoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, ffn: int, layers: int, seq: int, classes: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.layers = nn.ModuleList(MHABlock(d, heads, ffn, 0.1) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))


class PatchTransformer(nn.Module):
    """Patches by ``F.unfold`` + Linear embedding (Dosovitskiy et al. 2021, Eq. 1), pre-LN
    ``nn.TransformerEncoderLayer`` blocks, mean-pooled head."""

    def __init__(self, image: int, patch: int, d: int, heads: int, ffn: int, layers: int, classes: int) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, d)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, d) * 0.02)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = F.unfold(img, self.patch, stride=self.patch).transpose(1, 2)
        x = self.embed(x) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x).mean(dim=1))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(hw: int, classes: int):
    def make(batch: int, seed: int):
        g = _gen(seed)
        x, y = torch.randn(batch, 3, hw, hw, generator=g), torch.randint(0, classes, (batch,), generator=g)
        return (x,), (lambda out: F.cross_entropy(out, y))
    return make


def _vectors(d_in: int, classes: int):
    def make(batch: int, seed: int):
        g = _gen(seed)
        x, y = torch.randn(batch, d_in, generator=g), torch.randint(0, classes, (batch,), generator=g)
        return (x,), (lambda out: F.cross_entropy(out, y))
    return make


def _tokens(vocab: int, seq: int, classes: int):
    def make(batch: int, seed: int):
        g = _gen(seed)
        idx, y = torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, classes, (batch,), generator=g)
        return (idx,), (lambda out: F.cross_entropy(out, y))
    return make


_IR_PLAN = [(24, 1), (32, 2), (32, 1), (64, 2), (64, 1), (96, 1)]
_RX_PLAN = [(64, 128, 1), (128, 256, 2), (256, 512, 2)]

#: name → {size: (module factory, batch factory, batch)}; "small" for CI, "medium" for the CPU report.
UNSEEN: dict[str, dict[str, tuple[Callable[[], nn.Module], Callable, int]]] = {
    "invres": {"small": (lambda: InvertedResidualNet(8, [(8, 1), (16, 2)], 2, 10), _images(16, 10), 8),
               "medium": (lambda: InvertedResidualNet(16, _IR_PLAN, 4, 10), _images(64, 10), 16)},
    "resnext": {"small": (lambda: ResNeXt(8, [(16, 16, 1), (32, 32, 2)], 4, 10), _images(16, 10), 8),
                "medium": (lambda: ResNeXt(32, _RX_PLAN, 8, 10), _images(32, 10), 16)},
    "wide_mlp": {"small": (lambda: WideMLP(16, 64, 2, 4), _vectors(16, 4), 8),
                 "medium": (lambda: WideMLP(512, 4096, 2, 10), _vectors(512, 10), 64)},
    "mha_tf": {"small": (lambda: MHAEncoder(64, 32, 4, 64, 1, 16, 4), _tokens(64, 16, 4), 8),
               "medium": (lambda: MHAEncoder(4096, 256, 8, 1024, 2, 128, 10), _tokens(4096, 128, 10), 8)},
    "patch_mixer": {"small": (lambda: PatchTransformer(16, 4, 32, 4, 64, 1, 10), _images(16, 10), 8),
                    "medium": (lambda: PatchTransformer(64, 8, 256, 8, 1024, 3, 10), _images(64, 10), 16)},
}

#: the optimizer each unseen model trains with (simtrain name).
UNSEEN_OPTIMIZER = {"invres": "momentum", "resnext": "momentum", "wide_mlp": "adam", "mha_tf": "adamw",
                    "patch_mixer": "adamw"}

#: models with grouped convolutions (FlopCounterMode's weight-gradient count is off there).
GROUPED = frozenset({"invres", "resnext"})
