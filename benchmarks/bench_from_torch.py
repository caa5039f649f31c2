"""Benchmark: ``Model.from_torch`` on a ~100M-parameter transformer (target < 10 s; issue 3,
"Performance").

The model is the zoo's GPT at its standard size (GPT-2 small: 12 layers, hidden 768, 12 heads,
vocabulary 50257, 124M parameters). Two captures are timed:

* **fake** — the module is built on the meta device (no memory, no initialisation) and captured
  with fake tensors at batch 1 × 1024 tokens: this measures the importer itself (modes, hooks,
  rules, folding), the path for models too big to run;
* **real** — the module is built on the CPU and captured with real tensors at batch 1 × 128 tokens;
  the plain training step (no capture) is timed too, so the capture overhead is visible.

Prints the times, the rate of captured ATen operators, and the machine. Run:
``.venv/bin/python benchmarks/bench_from_torch.py``.
"""

from __future__ import annotations

import os
import platform
import time

import torch
import torch.nn.functional as F

from simtrain.graph.model import Model
from validation.zoo import _TF, GPT

from_torch = Model.from_torch

TARGET_S = 10.0


def _batch(seq: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (1, seq), generator=g)
    target = torch.randint(0, vocab, (1, seq), generator=g)
    return idx, (lambda out: F.cross_entropy(out.reshape(-1, vocab), target.reshape(-1)))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> int:
    size = _TF["standard"]
    print(f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''} "
          f"{os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"Python {platform.python_version()}")
    with torch.device("meta"):
        meta_gpt = GPT(size)
    idx, loss_fn = _batch(size.seq, size.vocab)
    model, fake_s = _timed(lambda: from_torch(meta_gpt, idx, loss_fn))
    print(f"fake capture, batch 1 × {size.seq}: {fake_s:.2f} s — {model.param_count:,} parameters, "
          f"{len(model.ops)} ops, {model.meta['aten_events']} ATen events "
          f"({model.meta['aten_events'] / fake_s:,.0f}/s), unmodelled {len(model.unmodelled)}")
    torch.manual_seed(0)
    cpu_gpt = GPT(size)
    seq = 128
    idx, loss_fn = _batch(seq, size.vocab)
    _, plain_s = _timed(lambda: loss_fn(cpu_gpt(idx)).backward())
    cpu_gpt.zero_grad(set_to_none=True)
    real, real_s = _timed(lambda: from_torch(cpu_gpt, idx, loss_fn))
    print(f"real capture, batch 1 × {seq}: {real_s:.2f} s (the plain training step alone: {plain_s:.2f} s) — "
          f"{real.flops_per_sample() / 1e9:.1f} GFLOP per sample")
    worst = max(fake_s, real_s)
    verdict = "meets" if worst < TARGET_S else "MISSES"
    print(f"target < {TARGET_S:.0f} s: {verdict} (slowest capture {worst:.2f} s)")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
