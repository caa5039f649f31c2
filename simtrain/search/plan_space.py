"""The layouts ``st.plan`` searches: node counts × every parallel axis and memory knob.

Node counts: every count from the smallest that could meet the deadline to the largest allowed,
when there are at most ``_DENSE`` of them; otherwise every count up to ``_DENSE`` past the smallest,
then a geometric ladder (ratio ≈ 1.12, so any count is within 12 % of a searched one) that includes
each power of two and 3 × a power of two. Per node count: tp over the divisors of the node's device
count that the model's heads allow, pp over the divisors of the remaining devices up to the model's
blocks and ``max_pp`` (16 by default: the deepest pipelines published runs use, e.g. Llama 3 405B), cp (long sequences) and ep (mixture-of-experts) over their divisors, micro-batch sizes,
virtual stages (interleaved 1F1B) when pp > 1, sequence parallelism only when tp > 1 (so no two
rows are the same job), ZeRO 0–3 and recompute none / selective / full. Layouts whose dp does not
divide the global batch are not generated (they cannot run); the estimate checks the rest.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["node_counts", "layout_rows", "SETTINGS"]

_DENSE = 16
_RATIO = 1.12
SETTINGS = {"zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"]}
MICRO_BATCHES = (1, 2, 4, 8)
VIRTUAL_STAGES = (1, 2, 4)


def node_counts(lo: int, hi: int) -> list[int]:
    """Node counts searched between ``lo`` and ``hi`` (see the module docstring)."""
    lo, hi = max(1, lo), max(1, hi)
    if hi - lo + 1 <= _DENSE:
        return list(range(lo, hi + 1))
    out = set(range(lo, lo + _DENSE))
    x = float(lo + _DENSE)
    while x < hi:
        out.add(int(round(x)))
        x *= _RATIO
    k = 1
    while k <= hi:
        out.update(n for n in (k, 3 * k) if lo <= n <= hi)
        k *= 2
    out.add(hi)
    return sorted(out)


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (n if limit is None else min(n, limit)) + 1) if n % d == 0]


def _degrees(facts: dict, per_node: int, devices: int, gbs: int, seq_len: int | None, max_pp: int):
    """(tp, pp, cp, ep, dp) tuples that can run on ``devices`` devices."""
    heads, blocks = facts.get("heads") or 0, min(facts.get("blocks") or 1, max_pp)
    experts = facts.get("experts") or 0
    cps = [1] + ([2, 4] if seq_len and seq_len >= 32768 else [])
    for tp in _divisors(per_node):
        if tp > 1 and heads and heads % tp:
            continue
        for cp in cps:
            if devices % (tp * cp):
                continue
            for pp in _divisors(devices // (tp * cp), blocks):
                dp = devices // (tp * cp * pp)
                if gbs % dp:
                    continue
                for ep in ([1] + [e for e in _divisors(experts) if e > 1 and (dp * cp) % e == 0] if experts else [1]):
                    yield tp, pp, cp, ep, dp


def layout_rows(facts: dict, per_node: int, nodes: list[int], gbs: int, seq_len: int | None, max_pp: int = 16,
                micro_batches=MICRO_BATCHES, virtual_stages=VIRTUAL_STAGES) -> np.ndarray:
    """One row per layout: (nodes, tp, pp, cp, ep, dp, micro_batch_size, virtual_stages, sp)."""
    blocks = facts.get("blocks") or 1
    rows = []
    for n in nodes:
        for tp, pp, cp, ep, dp in _degrees(facts, per_node, n * per_node, gbs, seq_len, max_pp):
            per_replica = gbs // dp
            for mb in (b for b in micro_batches if per_replica % b == 0):
                for v in (x for x in virtual_stages if (x == 1 or pp > 1) and pp * x <= blocks):
                    for sp in ((False, True) if tp > 1 else (False,)):
                        rows.append((n, tp, pp, cp, ep, dp, mb, v, sp))
    return np.array(rows, dtype=np.int64).reshape(-1, 9)


def min_nodes(tokens: float, flops_per_token: float, deadline_s: float | None, peak_flops_per_s: float,
              per_node: int, best_mfu: float = 0.75) -> int:
    """Fewest nodes that could meet the deadline at an optimistic MFU (none below it can)."""
    if deadline_s is None or not peak_flops_per_s:
        return 1
    devices = tokens * flops_per_token / (deadline_s * peak_flops_per_s * best_mfu)
    return max(1, math.floor(devices / per_node))
