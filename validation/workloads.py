"""What the suite trains: every zoo model at a size and batch fit for the run, on a device.

* ``small`` — the zoo's own tiny size (:mod:`validation.zoo`): the quick / CI run.
* ``medium`` — the zoo's classes at sizes where one fp32 training step on a 2-core CPU takes tens to
  hundreds of milliseconds: big enough that op work (not Python dispatch) dominates, small enough that
  warm-ups and repeats of all eight models finish in a few minutes. The zoo's ``standard`` size (the
  published models: GPT-2 small at 1024 tokens, ResNet-18 at 224²) takes seconds to minutes per step
  on such a CPU; on a GPU ``standard`` is the size to run.

Each :class:`Workload` makes a fresh module (weights from a seed) and a batch; the zoo builds its
batches on the CPU with closures over the targets, so :func:`to_device` moves both the inputs and the
tensors a loss closure captured (the zoo's ``make_batch`` takes no device).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from validation import unseen, zoo

__all__ = ["Workload", "workloads", "unseen_workloads", "to_device", "SIZES", "OPTIMIZER_OF"]

SIZES = ("small", "medium", "standard")

#: the optimizer each model trains with in the suite (as its family usually does): simtrain name.
OPTIMIZER_OF = {"mlp": "sgd", "cnn_bn": "momentum", "resnet18": "momentum", "mobilenet": "momentum",
                "gpt": "adamw", "bert": "adamw", "vit": "adamw", "moe": "adamw"}


@dataclass(frozen=True)
class Workload:
    name: str
    size: str
    batch: int
    make: Callable[[], torch.nn.Module]
    make_batch: Callable[[int, int], tuple[tuple, Callable]]
    """(batch, seed) → (inputs on the CPU, loss_fn)."""
    optimizer: str
    unseen: bool = False
    """One of :mod:`validation.unseen` (reported apart: metric ``step_time_unseen``)."""

    @property
    def case(self) -> str:
        return f"{self.name}/{self.size} b{self.batch}"

    def build(self, device: str = "cpu", seed: int = 0, batch: int | None = None):
        """(module, inputs, loss_fn) on ``device``; weights and data from ``seed``."""
        torch.manual_seed(seed)
        module = self.make().to(device)
        inputs, loss_fn = self.make_batch(batch or self.batch, seed + 1)
        inputs, loss_fn = to_device(inputs, loss_fn, device)
        return module, inputs, loss_fn


def _move(x, device: str):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def to_device(inputs: tuple, loss_fn: Callable, device: str) -> tuple[tuple, Callable]:
    """Inputs and the loss closure's captured tensors on ``device`` (a copy of the closure; the
    original keeps its CPU tensors)."""
    if device == "cpu":
        return inputs, loss_fn
    moved = tuple(_move(x, device) for x in inputs)
    cells = tuple(types.CellType(_move(c.cell_contents, device)) for c in (loss_fn.__closure__ or ()))
    fn = types.FunctionType(loss_fn.__code__, loss_fn.__globals__, loss_fn.__name__, loss_fn.__defaults__,
                            cells or None)
    return moved, fn


# --- medium sizes (the zoo's classes) -------------------------------------------------------------

def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(hw: int, classes: int):
    def make(batch: int, seed: int):
        g = _gen(seed)
        x = torch.randn(batch, 3, hw, hw, generator=g)
        y = torch.randint(0, classes, (batch,), generator=g)
        return (x,), (lambda out: F.cross_entropy(out, y))
    return make


def _tokens(s: zoo.TfSize, with_types: bool):
    def make(batch: int, seed: int):
        g = _gen(seed)
        idx = torch.randint(0, s.vocab, (batch, s.seq), generator=g)
        target = torch.randint(0, s.vocab, (batch, s.seq), generator=g)
        inputs = (idx, torch.randint(0, 2, (batch, s.seq), generator=g)) if with_types else (idx,)
        return inputs, (lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1)))
    return make


def _mlp_batch(d_in: int, classes: int):
    def make(batch: int, seed: int):
        g = _gen(seed)
        x, y = torch.randn(batch, d_in, generator=g), torch.randint(0, classes, (batch,), generator=g)
        return (x,), (lambda out: F.cross_entropy(out, y))
    return make


_GPT_M = zoo.TfSize(layers=2, hidden=256, heads=4, seq=128, vocab=4096, ffn=1024)
_BERT_M = zoo.TfSize(layers=2, hidden=256, heads=4, seq=128, vocab=4096, ffn=1024)
_VIT_M = zoo.TfSize(layers=4, hidden=192, heads=3, seq=0, vocab=0, ffn=768)
_MOE_M = zoo.TfSize(layers=1, hidden=256, heads=4, seq=128, vocab=4096, ffn=512)
_MOBILE_M = (16, [(32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1)])

#: name → (module factory, batch factory, batch) at the medium size.
_MEDIUM: dict[str, tuple[Callable, Callable, int]] = {
    "mlp": (lambda: zoo.MLP(784, 1024, 3, 10), _mlp_batch(784, 10), 128),
    "cnn_bn": (lambda: zoo.CNN((32, 64, 128), 10), _images(32, 10), 32),
    "resnet18": (lambda: zoo.ResNet18(32, 10), _images(64, 10), 8),
    "mobilenet": (lambda: zoo.MobileNet(*_MOBILE_M, 10), _images(64, 10), 16),
    "gpt": (lambda: zoo.GPT(_GPT_M), _tokens(_GPT_M, False), 8),
    "bert": (lambda: zoo.BERT(_BERT_M), _tokens(_BERT_M, True), 8),
    "vit": (lambda: zoo.ViT(_VIT_M, 32, 4, 10), _images(32, 10), 16),
    "moe": (lambda: zoo.MoEModel(_MOE_M, 4, 2), _tokens(_MOE_M, False), 8),
}

#: batch per model at the zoo's own sizes.
_ZOO_BATCH = {"small": 8, "standard": 8}


def _from_zoo(name: str, size: str, batch: int) -> Workload:
    entry = zoo.ZOO[name]
    return Workload(name, size, batch, lambda: entry.make(size),
                    lambda b, seed: entry.make_batch(size, b, seed), OPTIMIZER_OF[name])


def workloads(size: str, names: tuple[str, ...] | None = None) -> list[Workload]:
    """The zoo at ``size`` (see module docstring), optionally only ``names``, in the zoo's order."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    chosen = [n for n in zoo.ZOO if names is None or n in names]
    unknown = set(names or ()) - set(zoo.ZOO) - set(unseen.UNSEEN)
    if unknown:
        raise ValueError(f"unknown zoo models {sorted(unknown)}; known: {', '.join(zoo.ZOO)}")
    if size != "medium":
        return [_from_zoo(n, size, _ZOO_BATCH[size]) for n in chosen]
    return [Workload(n, size, _MEDIUM[n][2], _MEDIUM[n][0], _MEDIUM[n][1], OPTIMIZER_OF[n]) for n in chosen]


def unseen_workloads(size: str, names: tuple[str, ...] | None = None) -> list[Workload]:
    """The unseen set (:mod:`validation.unseen`) at ``size`` ("small" or "medium"; "standard" runs
    "medium"), optionally only ``names``; names of the zoo are ignored here."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    at = "small" if size == "small" else "medium"
    chosen = [n for n in unseen.UNSEEN if names is None or n in names]
    return [Workload(n, at, unseen.UNSEEN[n][at][2], unseen.UNSEEN[n][at][0], unseen.UNSEEN[n][at][1],
                     unseen.UNSEEN_OPTIMIZER[n], unseen=True) for n in chosen]
