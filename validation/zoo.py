"""Reference PyTorch models for checking simtrain against real runs (tests and the validation suite).

Each :class:`ZooEntry` builds a module at ``"small"`` (tiny, for CI) or ``"standard"`` (the usual
published size) and makes a batch: example inputs whose dim 0 is the batch, and a loss function of
the module's output. Everything takes a seed; nothing downloads weights. torchvision is not used:
ResNet-18, the MobileNet-style net and the ViT are written here from their papers.

* ``mlp`` — Linear/ReLU stack, cross-entropy.
* ``cnn_bn`` — Conv-BatchNorm-ReLU stages with max-pooling, global average pool, linear head.
* ``resnet18`` — He et al. 2016, Table 1 (BasicBlock ×[2, 2, 2, 2], 1×1 projection shortcuts).
* ``mobilenet`` — Howard et al. 2017, Table 1: 3×3 depthwise (groups = channels) + 1×1 pointwise.
* ``gpt`` — pre-LN decoder, causal scaled-dot-product attention, GELU MLP, dropout, tied embeddings
  (Radford et al. 2019).
* ``bert`` — post-LN bidirectional encoder with token-type embeddings and a tied MLM head
  (Devlin et al. 2019).
* ``vit`` — patch-embedding convolution, class token, pre-LN encoder (Dosovitskiy et al. 2021).
* ``moe`` — a transformer layer whose FFN is a top-k routed mixture of experts; tokens are gathered
  per expert and scattered back (Shazeer et al. 2017; Fedus et al. 2022).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ZooEntry", "ZOO", "build", "SIZES"]

SIZES = ("small", "standard")


@dataclass(frozen=True)
class ZooEntry:
    name: str
    make: Callable[[str], nn.Module]
    """size → module (``"small"`` | ``"standard"``)."""
    make_batch: Callable[[str, int, int], tuple[tuple, Callable]]
    """(size, batch, seed) → (example inputs, loss_fn(output) → scalar)."""
    grouped_conv: bool = False
    """Has convolutions with groups > 1 (FlopCounterMode's weight-gradient count is off there)."""
    data_dependent: bool = False
    """Per-op shapes depend on the data (MoE routing): compare totals across batch sizes."""


def _ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- MLP ------------------------------------------------------------------------------------------

_MLP = {"small": (16, 32, 2, 4), "standard": (784, 1024, 3, 10)}


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, depth: int, classes: int) -> None:
        super().__init__()
        dims = [d_in] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


def _mlp_batch(size: str, batch: int, seed: int):
    d_in, _, _, classes = _MLP[size]
    g = _gen(seed)
    x, y = torch.randn(batch, d_in, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return (x,), (lambda out: F.cross_entropy(out, y))


# --- CNNs -----------------------------------------------------------------------------------------

_IMG = {"small": (3, 16), "standard": (3, 224)}


def _image_batch(size: str, batch: int, seed: int, classes: int):
    c, hw = _IMG[size]
    g = _gen(seed)
    x, y = torch.randn(batch, c, hw, hw, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return (x,), (lambda out: F.cross_entropy(out, y))


class CNN(nn.Module):
    def __init__(self, widths: tuple[int, ...], classes: int) -> None:
        super().__init__()
        chans = (3, *widths)
        self.stages = nn.ModuleList(
            nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                          nn.MaxPool2d(2)) for a, b in zip(chans, chans[1:], strict=False))
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for s in self.stages:
            x = s(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class BasicBlock(nn.Module):
    """3×3 → 3×3 with identity or 1×1 projection shortcut (He et al. 2016, §3.3)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, c = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            out = width * mult
            blocks += [BasicBlock(c, out, 1 if i == 0 else 2), BasicBlock(out, out, 1)]
            c = out
        self.layers = nn.ModuleList(blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.layers:
            x = b(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class DepthwiseSeparable(nn.Module):
    """3×3 depthwise conv (groups = channels) + BN + ReLU6, then 1×1 pointwise + BN + ReLU6."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.bn2(self.pw(F.relu6(self.bn1(self.dw(x))))))


_MOBILE = {  # (stem width, [(out, stride), ...]) — the standard row is MobileNet v1 Table 1
    "small": (8, [(16, 1), (32, 2), (32, 1), (64, 2)]),
    "standard": (32, [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5
                 + [(1024, 2), (1024, 1)]),
}


class MobileNet(nn.Module):
    def __init__(self, stem: int, plan: list[tuple[int, int]], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU6())
        blocks, c = [], stem
        for out, stride in plan:
            blocks.append(DepthwiseSeparable(c, out, stride))
            c = out
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# --- transformers ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TfSize:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int


_TF = {"small": TfSize(2, 32, 4, 16, 64, 128), "standard": TfSize(12, 768, 12, 1024, 50257, 3072)}
_BERT = {"small": TfSize(2, 32, 4, 16, 64, 128), "standard": TfSize(12, 768, 12, 512, 30522, 3072)}


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool, dropout: float) -> None:
        super().__init__()
        self.heads, self.causal, self.p = heads, causal, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLPBlock(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """One transformer layer; ``pre_ln`` (GPT-2, ViT) or post-LN (BERT); ``ffn`` any module."""

    def __init__(self, s: TfSize, causal: bool, pre_ln: bool, dropout: float, ffn: nn.Module | None = None) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.ln1, self.ln2 = nn.LayerNorm(s.hidden), nn.LayerNorm(s.hidden)
        self.attn = SelfAttention(s.hidden, s.heads, causal, dropout)
        self.mlp = ffn if ffn is not None else MLPBlock(s.hidden, s.ffn)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            x = x + self.drop(self.attn(self.ln1(x)))
            return x + self.drop(self.mlp(self.ln2(x)))
        x = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(x + self.drop(self.mlp(x)))


class GPT(nn.Module):
    def __init__(self, s: TfSize, dropout: float = 0.1) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(s.vocab, s.hidden), nn.Embedding(s.seq, s.hidden)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(Block(s, True, True, dropout) for _ in range(s.layers))
        self.ln_f = nn.LayerNorm(s.hidden)
        self.head = nn.Linear(s.hidden, s.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied (Press & Wolf 2017)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x))


class BERT(nn.Module):
    def __init__(self, s: TfSize, dropout: float = 0.1) -> None:
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(s.vocab, s.hidden), nn.Embedding(s.seq, s.hidden), nn.Embedding(2, s.hidden)
        self.ln_e, self.drop = nn.LayerNorm(s.hidden), nn.Dropout(dropout)
        self.layers = nn.ModuleList(Block(s, False, False, dropout) for _ in range(s.layers))
        self.mlm = nn.Sequential(nn.Linear(s.hidden, s.hidden), nn.GELU(), nn.LayerNorm(s.hidden))
        self.decoder = nn.Linear(s.hidden, s.vocab)
        self.decoder.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.ln_e(self.tok(idx) + self.pos(pos) + self.typ(types)))
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.mlm(x))


def _lm_batch(sizes: dict[str, TfSize], with_types: bool):
    def make(size: str, batch: int, seed: int):
        s = sizes[size]
        g = _gen(seed)
        idx = torch.randint(0, s.vocab, (batch, s.seq), generator=g)
        target = torch.randint(0, s.vocab, (batch, s.seq), generator=g)
        inputs = (idx, torch.randint(0, 2, (batch, s.seq), generator=g)) if with_types else (idx,)
        return inputs, (lambda out: _ce(out, target))
    return make


_VIT = {"small": (TfSize(2, 32, 4, 0, 0, 64), 16, 4, 10), "standard": (TfSize(12, 768, 12, 0, 0, 3072), 224, 16, 1000)}


class ViT(nn.Module):
    def __init__(self, s: TfSize, image: int, patch: int, classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, s.hidden, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, s.hidden))
        self.pos = nn.Parameter(torch.randn(1, n + 1, s.hidden) * 0.02)
        self.layers = nn.ModuleList(Block(s, False, True, dropout) for _ in range(s.layers))
        self.ln = nn.LayerNorm(s.hidden)
        self.head = nn.Linear(s.hidden, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x[:, 0]))


def _vit_batch(size: str, batch: int, seed: int):
    _, image, _, classes = _VIT[size]
    g = _gen(seed)
    x, y = torch.randn(batch, 3, image, image, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return (x,), (lambda out: F.cross_entropy(out, y))


# --- mixture of experts ---------------------------------------------------------------------------

class MoE(nn.Module):
    """Top-k router (softmax over experts, renormalised top-k gates); each expert is a GELU MLP
    applied only to the tokens routed to it (gather with index_select, scatter back with index_add)."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.num_experts, self.top_k = experts, top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(MLPBlock(hidden, ffn) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        gates, chosen = F.softmax(self.router(x), dim=-1).topk(self.top_k, dim=-1)
        gates = gates / gates.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            y = expert(x.index_select(0, rows)) * gates[rows, slot].unsqueeze(-1)
            out = out.index_add(0, rows, y)
        return out.view(shape)


_MOE = {"small": (TfSize(1, 32, 4, 16, 64, 64), 4, 2), "standard": (TfSize(4, 512, 8, 512, 32000, 2048), 8, 2)}


class MoEModel(nn.Module):
    def __init__(self, s: TfSize, experts: int, top_k: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList(Block(s, True, True, 0.0, MoE(s.hidden, s.ffn, experts, top_k))
                                    for _ in range(s.layers))
        self.ln_f = nn.LayerNorm(s.hidden)
        self.head = nn.Linear(s.hidden, s.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x))


# --- the zoo --------------------------------------------------------------------------------------

ZOO: dict[str, ZooEntry] = {
    "mlp": ZooEntry("mlp", lambda size: MLP(*_MLP[size]), _mlp_batch),
    "cnn_bn": ZooEntry("cnn_bn", lambda size: CNN((8, 16) if size == "small" else (64, 128, 256), 10),
                       lambda size, b, seed: _image_batch(size, b, seed, 10)),
    "resnet18": ZooEntry("resnet18", lambda size: ResNet18(8 if size == "small" else 64, 10 if size == "small" else 1000),
                         lambda size, b, seed: _image_batch(size, b, seed, 10 if size == "small" else 1000)),
    "mobilenet": ZooEntry("mobilenet", lambda size: MobileNet(*_MOBILE[size], 10 if size == "small" else 1000),
                          lambda size, b, seed: _image_batch(size, b, seed, 10 if size == "small" else 1000),
                          grouped_conv=True),
    "gpt": ZooEntry("gpt", lambda size: GPT(_TF[size]), _lm_batch(_TF, False)),
    "bert": ZooEntry("bert", lambda size: BERT(_BERT[size]), _lm_batch(_BERT, True)),
    "vit": ZooEntry("vit", lambda size: ViT(*_VIT[size]), _vit_batch),
    "moe": ZooEntry("moe", lambda size: MoEModel(*_MOE[size]),
                    lambda size, b, seed: _lm_batch({size: _MOE[size][0]}, False)(size, b, seed),
                    data_dependent=True),
}


def build(name: str, size: str = "small", batch: int = 2, seed: int = 0):
    """(module, example inputs, loss_fn) of zoo entry ``name``; weights from ``seed``."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    entry = ZOO[name]
    torch.manual_seed(seed)
    module = entry.make(size)
    inputs, loss_fn = entry.make_batch(size, batch, seed + 1)
    return module, inputs, loss_fn
