"""Alpha-beta formulas of collective algorithms over a logical topology (a list of dimensions).

The factoring follows ASTRA-sim (Rashidi et al., ISPASS 2020): a *logical topology* is a list of
dimensions, innermost first, each with its size, per-rank per-direction bandwidths and per-step latency;
an *algorithm* says how a collective decomposes over those dimensions. Every function here returns an
:data:`Estimate` ``(latency_s, bandwidth_s, steps, messages, bytes_per_dim, detail)``:

* ``latency_s``   the α part: Σ steps × per-step latency of the dimension the step crosses;
* ``bandwidth_s`` the β part: bytes on the bottleneck path / its bandwidth;
* ``steps``       sequential communication steps (what "7 steps for 8 GPUs" counts);
* ``messages``    point-to-point transfers issued by all ranks together (what "56 naive" counts);
* ``bytes_per_dim`` bytes through one rank's port per dimension, in the busier direction;
* ``detail``      the algorithm with its phases (hierarchical) for reports.

Sources. Ring, recursive halving/doubling, binomial tree: Thakur, Rabenseifner & Gropp, "Optimization
of collective communication operations in MPICH", IJHPCA 19(1), 2005, §3 (cost α + nβ per message).
Multi-tier ring latency (only the steps that cross a node boundary pay the network latency) and the
double-binary-tree model (latency 2·(intra chain + log2(nodes)·inter), time 2·S/B): NCCL's tuning
model, ``src/graph/tuning.cc`` [NCCL-TUNE, hardware.md §9b]. Dimension-ordered (hierarchical)
collectives: ASTRA-sim's multi-dimensional collectives; Sack & Gropp, "Collective algorithms for
multiported torus networks", ACM TOPC 1(2), 2015 (concurrent per-axis rotation, ``multi_axis``).

Dimension kinds: ``switch`` (a non-blocking crossbar or fat tree: any pair at the per-rank port rate),
``mesh`` (a full mesh: one link per peer), ``ring`` (a torus axis or a ring: neighbour links only),
``tree`` (an in-network broadcast/reduce tree such as Cerebras SwarmX).
"""

from __future__ import annotations

import math

__all__ = ["View", "Estimate", "ALGORITHMS_BY_KIND", "estimate", "valid", "hierarchical_plan", "combine"]

Estimate = tuple  # (latency_s, bandwidth_s, steps, messages, bytes_per_dim, detail)

ALGORITHMS_BY_KIND: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "rhd", "direct", "in_network", "hierarchical", "multi_axis"),
    "reduce_scatter": ("ring", "rhd", "direct", "in_network", "hierarchical", "multi_axis"),
    "all_gather": ("ring", "rhd", "direct", "in_network", "hierarchical", "multi_axis"),
    "all_to_all": ("direct", "hierarchical"),
    "broadcast": ("ring", "tree", "direct", "in_network", "hierarchical"),
    "reduce": ("ring", "tree", "direct", "in_network", "hierarchical"),
    "send_recv": ("direct",),
}
_POINT_TO_POINT_KINDS = frozenset(("switch", "mesh", "ring"))
_CROSSBAR_KINDS = frozenset(("switch", "mesh"))


class View:
    """Effective (efficiency-scaled) numbers of a logical topology, as plain tuples of floats."""

    __slots__ = ("sizes", "n", "bw", "ring", "pair", "alpha", "kinds", "wrap", "innet", "dims", "kindset",
                 "memo")

    def __init__(self, sizes, bw, ring, pair, alpha, kinds, wrap, innet) -> None:
        self.sizes, self.bw, self.ring, self.pair = sizes, bw, ring, pair
        self.alpha, self.kinds, self.wrap, self.innet = alpha, kinds, wrap, innet
        self.n = math.prod(sizes)
        self.dims = len(sizes)
        self.kindset = frozenset(kinds)
        self.memo: dict = {}  # per-view caches (sub-views, valid candidates, per-byte estimates)

    def sub(self, lo: int, hi: int) -> View:
        key = ("sub", lo, hi)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = View(self.sizes[lo:hi], self.bw[lo:hi], self.ring[lo:hi], self.pair[lo:hi],
                                        self.alpha[lo:hi], self.kinds[lo:hi], self.wrap[lo:hi], self.innet[lo:hi])
        return hit


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------
def _inner_products(v: View) -> list[int]:
    """inner[d] = Π_{j<d} s_j: ranks per group of the dimensions inside d."""
    out, acc = [], 1
    for s in v.sizes:
        out.append(acc)
        acc *= s
    return out


def _chain_steps(v: View) -> list[int]:
    """Ring hops per phase attributed to each dimension: (s_d − 1)·Π_{j>d} s_j (they sum to n − 1)."""
    out, outer = [0] * v.dims, 1
    for d in range(v.dims - 1, -1, -1):
        out[d] = (v.sizes[d] - 1) * outer
        outer *= v.sizes[d]
    return out


def _effective(per_rank: tuple, v: View) -> float:
    """Bandwidth of a multi-channel path through every dimension: min_d B_d · Π_{j<d} s_j.

    A flat ring (or chain) crosses dimension d once per Π_{j<d} s_j ranks, so each group of the inner
    dimensions can feed that crossing with all of its ranks' d-bandwidth (NCCL builds one ring per NIC).
    """
    return min(b * i for b, i in zip(per_rank, _inner_products(v), strict=False))


def _hop_fraction(v: View) -> list[float]:
    """Share of a flat ring's n hops that cross each dimension (the outermost one includes the wrap)."""
    steps = _chain_steps(v)
    steps[-1] += 1
    return [h / v.n for h in steps]


def _log2_ceil(n: int) -> int:
    return max(0, (n - 1).bit_length())


# ----------------------------------------------------------------------------------------------
# Flat algorithms
# ----------------------------------------------------------------------------------------------
def _ring(kind: str, S: float, v: View) -> Estimate:
    """Ring (Thakur 2005 §3; NCCL ring): each phase is n−1 steps of S/n.

    all-reduce = reduce-scatter + all-gather: 2(n−1) steps, 2(n−1)/n·S per rank.
    broadcast/reduce = pipelined chain: n−1 hops of latency, S/B of bandwidth.
    latency = Σ_d steps_d · α_d with steps_d = phases·(s_d − 1)·Π_{j>d} s_j (NCCL: only the
    2(nNodes − 1) steps that cross nodes pay the inter-node latency).
    """
    n = v.n
    phases = 2 if kind == "all_reduce" else 1
    chain = _chain_steps(v)
    lat = phases * sum(st * a for st, a in zip(chain, v.alpha, strict=False))
    b_eff = _effective(v.ring, v)
    if kind in ("broadcast", "reduce"):
        volume = S
        messages = n - 1
    else:
        volume = phases * (n - 1) / n * S
        messages = phases * (n - 1) * n
    per_dim = tuple(volume * f for f in _hop_fraction(v))
    return (lat, volume / b_eff, phases * (n - 1), messages, per_dim, "ring")


def _tree(kind: str, S: float, v: View) -> Estimate:
    """Double binary tree (NCCL) for all-reduce; binomial tree (Thakur 2005 §3) for broadcast/reduce.

    all-reduce: chain inside the inner dimensions, binary tree across the outermost one;
    latency 2·(Σ_{d<L}(s_d − 1)·α_d + ⌈log2 s_L⌉·α_L); bandwidth 2·S / B_eff (each rank receives
    and sends S in the reduce and again in the broadcast; two trees carry S/2 each).
    broadcast/reduce: Σ_d ⌈log2 s_d⌉ rounds of (α_d + S/B_d), outer dimensions first.
    """
    if kind == "all_reduce":
        hops = [s - 1 for s in v.sizes[:-1]] + [_log2_ceil(v.sizes[-1])]
        lat = 2 * sum(h * a for h, a in zip(hops, v.alpha, strict=False))
        edges = _chain_steps(v)
        edges[-1] = v.sizes[-1] - 1
        per_dim = tuple(2 * S * e / v.n for e in edges)
        return (lat, 2 * S / _effective(v.bw, v), 2 * sum(hops), 4 * (v.n - 1), per_dim, "tree")
    rounds = [_log2_ceil(s) for s in v.sizes]
    lat = sum(r * a for r, a in zip(rounds, v.alpha, strict=False))
    bw_s = sum(r * S / b for r, b in zip(rounds, v.bw, strict=False))
    per_dim = tuple(r * S for r in rounds)
    return (lat, bw_s, sum(rounds), v.n - 1, per_dim, "tree")


def _rhd(kind: str, S: float, v: View) -> Estimate:
    """Recursive halving (reduce-scatter) / doubling (all-gather) (Thakur 2005 §3.1 and §3.5).

    Step k exchanges S/2^(k+1) with the partner at distance 2^k, innermost dimension first so the big
    chunks use the fast links. all-reduce = halving then doubling (Rabenseifner): 2·log2 n steps,
    2(n−1)/n·S bytes. A non-power-of-two single dimension first folds its r = n − 2^⌊log2 n⌋ extra ranks
    into partners (one extra step of S, and one more to hand the result back for all-reduce).
    """
    phases = 2 if kind == "all_reduce" else 1
    per_dim = [0.0] * v.dims
    lat = bw_s = 0.0
    steps = 0
    chunk = S
    for d, s in enumerate(v.sizes):
        for _ in range(s.bit_length() - 1):  # ⌊log2 s_d⌋ halvings
            chunk /= 2
            lat += v.alpha[d]
            bw_s += chunk / v.pair[d]
            per_dim[d] += chunk
            steps += 1
    lat, bw_s, steps = phases * lat, phases * bw_s, phases * steps
    per_dim = [phases * b for b in per_dim]
    n = v.n
    if n & (n - 1):  # single non-power-of-two dimension (valid() rejects the multi-dimension case)
        lat += phases * v.alpha[0]
        bw_s += phases * S / v.pair[0]
        per_dim[0] += phases * S
        steps += phases
    return (lat, bw_s, steps, n * steps, tuple(per_dim), "rhd")


def _direct(kind: str, S: float, v: View) -> Estimate:
    """Direct exchange: every rank talks to every peer at once (one step).

    all-reduce one-shot: each rank reads all n−1 peers' full buffers, (n−1)·S per port (the "naive"
    peer-to-peer synchronisation: n(n−1) messages). reduce-scatter / all-gather / all-to-all: each rank
    sends (n−1)/n·S. broadcast/reduce: the root's port carries (n−1)·S. send/recv: S over the outermost
    dimension. All-to-all on several dimensions: traffic leaving through dimension d is the share of
    peers whose outermost differing coordinate is d; on a ring dimension it follows shortest paths.
    """
    n = v.n
    if kind == "send_recv":
        per_dim = (0.0,) * (v.dims - 1) + (S,)
        return (v.alpha[-1], S / v.pair[-1], 1, 1, per_dim, "direct")
    if kind == "all_to_all":
        return _direct_all_to_all(S, v)
    volume = (n - 1) * S if kind in ("all_reduce", "broadcast", "reduce") else (n - 1) / n * S
    messages = n - 1 if kind in ("broadcast", "reduce") else n * (n - 1)
    return (v.alpha[0], volume / v.bw[0], 1, messages, (volume,), "direct")


def _direct_all_to_all(S: float, v: View) -> Estimate:
    n = v.n
    if v.kinds[0] == "ring" and v.dims == 1:
        s = n
        if v.wrap[0]:  # bidirectional ring, shortest paths: byte-hops Σ_j min(j, n−j)·S/n over 2n links
            hop_sum = sum(min(j, s - j) for j in range(1, s))
            bw_s = S * hop_sum / (s * 2 * v.pair[0])
            hops = s // 2
        else:  # a line: the middle link carries ⌊n/2⌋·⌈n/2⌉ messages of S/n each way
            bw_s = (s // 2) * ((s + 1) // 2) * (S / s) / v.pair[0]
            hops = s - 1
        return (hops * v.alpha[0], bw_s, hops, n * (n - 1), ((n - 1) / n * S,), "direct")
    inner = _inner_products(v)
    per_dim = tuple(S * (s - 1) * i / n for s, i in zip(v.sizes, inner, strict=False))
    bw_s = max(b / w for b, w in zip(per_dim, v.bw, strict=False))
    return (max(v.alpha), bw_s, 1, n * (n - 1), per_dim, "direct")


def _in_network(kind: str, S: float, v: View) -> Estimate:
    """In-switch reduction / multicast (NVLink SHARP, IB SHARP, Cerebras SwarmX).

    all-reduce: each rank sends S into the switch and receives the reduced S back: S/B, two steps
    (nccl-tests' in-network busbw factor (n−1)/(n+1) is about this kind of algorithm [NCCL-PERF]).
    reduce-scatter / all-gather: one step, (n−1)/n·S. broadcast / reduce: one step, S.
    """
    n = v.n
    if kind == "all_reduce":
        return (2 * v.alpha[0], S / v.bw[0], 2, 2 * n, (S,), "in_network")
    volume = S if kind in ("broadcast", "reduce") else (n - 1) / n * S
    return (v.alpha[0], volume / v.bw[0], 1, n, (volume,), "in_network")


# ----------------------------------------------------------------------------------------------
# Multi-dimensional algorithms
# ----------------------------------------------------------------------------------------------
def hierarchical_plan(kind: str, v: View) -> list[tuple[str, int, int, float, int]]:
    """Phases of the dimension-by-dimension algorithm (ASTRA-sim; NCCL's intra-node reduce-scatter →
    inter-node all-reduce → intra-node all-gather), as (collective, first dim, end dim, share of S,
    parallel groups). Each phase uses the best algorithm for its own dimension(s); times add.

    all-reduce = RS(dim 0, S) + AR(dims 1.., S/s_0) + AG(dim 0, S)   (recursive: dimension-ordered)
    reduce-scatter = RS(dim 0, S) + RS(dims 1.., S/s_0); all-gather mirrors it.
    all-to-all, broadcast, reduce = Σ_d the same collective on dimension d alone, on S.
    """
    L, s0, n = v.dims, v.sizes[0], v.n
    if kind in ("all_to_all", "broadcast", "reduce"):
        return [(kind, d, d + 1, 1.0, n // v.sizes[d]) for d in range(L)]
    if kind == "all_gather":
        return [(kind, 1, L, 1 / s0, s0), (kind, 0, 1, 1.0, n // s0)]
    plan = [("reduce_scatter", 0, 1, 1.0, n // s0), (kind, 1, L, 1 / s0, s0)]
    if kind == "all_reduce":
        plan.append(("all_gather", 0, 1, 1.0, n // s0))
    return plan


def combine(parts, dims: int) -> Estimate:
    """One hierarchical estimate from its phases' estimates: ``parts`` = [(phase, estimate)] with the
    phase as returned by :func:`hierarchical_plan` and the estimate per byte of the phase's share."""
    lat = bw_s = 0.0
    steps = messages = 0
    per_dim = [0.0] * dims
    names = []
    for (sub_kind, lo, hi, share, groups), est in parts:
        lat, bw_s, steps = lat + est[0], bw_s + est[1] * share, steps + est[2]
        messages += est[3] * groups
        for i, b in enumerate(est[4]):
            per_dim[lo + i] += b * share
        names.append(f"{sub_kind}:{est[5]}@{lo}" + (f"-{hi - 1}" if hi - lo > 1 else ""))
    return (lat, bw_s, steps, messages, tuple(per_dim), "hierarchical[" + " > ".join(names) + "]")


def _multi_axis(kind: str, S: float, v: View) -> Estimate:
    """Torus axes used concurrently: S is split into L parts; part p runs the dimension-ordered
    algorithm starting at axis p (rotated order), so every axis is busy at once (Sack & Gropp 2015).

    bandwidth = max_d Σ_p phases·(s_d−1)/s_d · (S/L)/Π(axes before d in p's order) / R_d;
    latency = Σ_d phases·(s_d − 1)·α_d (the parts' steps interleave).
    """
    L = v.dims
    phases = 2 if kind == "all_reduce" else 1
    load = [0.0] * L
    for p in range(L):
        chunk = S / L
        for j in range(L):
            d = (p + j) % L
            s = v.sizes[d]
            load[d] += phases * (s - 1) / s * chunk
            chunk /= s
    bw_s = max(b / r for b, r in zip(load, v.ring, strict=False))
    lat = sum(phases * (s - 1) * a for s, a in zip(v.sizes, v.alpha, strict=False))
    steps = sum(phases * (s - 1) for s in v.sizes)
    return (lat, bw_s, steps, v.n * steps, tuple(load), "multi_axis")


# ----------------------------------------------------------------------------------------------
# Validity and dispatch
# ----------------------------------------------------------------------------------------------
def valid(kind: str, algorithm: str, v: View) -> bool:
    """Whether ``algorithm`` can run ``kind`` on topology ``v`` (see the module docstring)."""
    if algorithm not in ALGORITHMS_BY_KIND[kind]:
        return False
    kinds, L = v.kindset, v.dims
    if algorithm == "ring":
        return kinds <= _POINT_TO_POINT_KINDS
    if algorithm == "tree":
        return kinds == {"switch"}
    if algorithm == "rhd":
        return kinds <= _CROSSBAR_KINDS and (L == 1 or all(s & (s - 1) == 0 for s in v.sizes))
    if algorithm == "direct":
        if kind == "send_recv":
            return True
        if kind == "all_to_all":
            return kinds <= _CROSSBAR_KINDS or (L == 1 and kinds <= _POINT_TO_POINT_KINDS)
        return L == 1 and kinds <= _CROSSBAR_KINDS
    if algorithm == "in_network":
        return L == 1 and v.innet[0]
    if algorithm == "multi_axis":
        return L >= 2 and kinds == {"ring"}
    return L >= 2  # hierarchical


_FLAT = {"ring": _ring, "tree": _tree, "rhd": _rhd, "direct": _direct, "in_network": _in_network,
         "multi_axis": _multi_axis}


def estimate(kind: str, algorithm: str, S: float, v: View) -> Estimate:
    """The estimate of one valid flat (single-decomposition) algorithm; hierarchical ones are built
    from :func:`hierarchical_plan` and :func:`combine`."""
    return _FLAT[algorithm](kind, S, v)
