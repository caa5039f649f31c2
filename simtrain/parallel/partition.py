"""Split a model's blocks into pipeline chunks (pp × virtual_stages of them).

Repeated blocks (names ending in ".<int>", e.g. ``layers.7``) are spread evenly, the first chunks
taking one more when the count does not divide (an uneven split); blocks before the first repeated
block (embedding) join the first chunk and blocks after the last (final norm, LM head, loss) join the
last, as Megatron-LM places them. Models without repeated blocks (CNNs) are cut into contiguous
chunks that minimise the largest chunk's forward FLOPs (linear partition, exact by binary search).
"""

from __future__ import annotations

import re

from simtrain.graph.model import Model

__all__ = ["partition_blocks"]

_REPEATED = re.compile(r".*\.\d+$")


def partition_blocks(model: Model, chunks: int, first: int | None = None,
                     last: int | None = None) -> list[tuple[str, ...]] | None:
    """``chunks`` contiguous groups of block names, or None when there are fewer blocks than chunks.
    ``first`` / ``last``: repeated blocks on the first / last chunk, the rest split evenly over the
    others (Megatron's ``--decoder-first/last-pipeline-num-layers``; the config checks they divide)."""
    key = f"_partition_{chunks}_{first}_{last}"
    if key not in model.meta:
        model.meta[key] = _partition(model, chunks) if first is None and last is None else \
            _pinned_ends(list(model.blocks), chunks, first, last)
    return model.meta[key]


def _pinned_ends(blocks: list[str], chunks: int, first: int | None, last: int | None) -> list[tuple[str, ...]]:
    """``first`` layers on chunk 0 and ``last`` on the last chunk (None: the even share), the other
    layers evenly over the chunks between; embedding and head join the ends as in :func:`_even`."""
    rep = [i for i, b in enumerate(blocks) if _REPEATED.match(b)]
    layers = blocks[rep[0]:rep[-1] + 1]
    middle = chunks - (first is not None) - (last is not None)
    share = (len(layers) - (first or 0) - (last or 0)) // max(middle, 1)
    counts = [share] * chunks
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    out, start = [], 0
    for n in counts:
        out.append(list(layers[start:start + n]))
        start += n
    out[0] = blocks[:rep[0]] + out[0]
    out[-1] = out[-1] + blocks[rep[-1] + 1:]
    return [tuple(c) for c in out]


def _partition(model: Model, chunks: int) -> list[tuple[str, ...]] | None:
    blocks = list(model.blocks)
    rep = [i for i, b in enumerate(blocks) if _REPEATED.match(b)]
    if rep and len(rep) >= chunks:
        return _even(blocks, rep[0], rep[-1], chunks)
    if len(blocks) < chunks:
        return None
    return _balanced(model, blocks, chunks)


def _even(blocks: list[str], first: int, last: int, chunks: int) -> list[tuple[str, ...]]:
    layers = blocks[first:last + 1]
    base, extra = divmod(len(layers), chunks)
    out, start = [], 0
    for c in range(chunks):
        n = base + (1 if c < extra else 0)
        out.append(list(layers[start:start + n]))
        start += n
    out[0] = blocks[:first] + out[0]
    out[-1] = out[-1] + blocks[last + 1:]
    return [tuple(c) for c in out]


def _balanced(model: Model, blocks: list[str], chunks: int) -> list[tuple[str, ...]]:
    weight = {b: 0.0 for b in blocks}
    for op in model.ops:
        weight[op.block] += op.flops.total + 1.0
    w = [weight[b] for b in blocks]

    def cuts_for(limit: float) -> list[int] | None:
        cuts, acc = [], 0.0
        for i, x in enumerate(w):
            if acc + x > limit and acc > 0:
                cuts.append(i)
                acc = 0.0
            acc += x
        return cuts if len(cuts) <= chunks - 1 else None

    lo, hi = max(w), sum(w)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if cuts_for(mid) is not None else (mid, hi)
    cuts = cuts_for(hi) or []
    while len(cuts) < chunks - 1:  # split further so every chunk is non-empty
        cand = next(i for i in range(1, len(blocks)) if i not in cuts)
        cuts = sorted(cuts + [cand])
    edges = [0] + cuts + [len(blocks)]
    return [tuple(blocks[a:b]) for a, b in zip(edges, edges[1:], strict=False)]
