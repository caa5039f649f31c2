"""Collectives on logical topologies: time, bytes per tier and bus bandwidth, as pure functions.

``collective_time(kind, message_bytes, topology)`` returns a frozen :class:`CollectiveResult`. The
message size ``S`` is defined as nccl-tests defines it [NCCL-PERF, hardware.md §9a]:

* all-reduce, broadcast, reduce, send/recv: the buffer each rank holds;
* reduce-scatter: the total input array (recvcount × element size × n);
* all-gather: the total output array (sendcount × element size × n);
* all-to-all: everything one rank sends, its own share included.

A :class:`LogicalTopology` is a list of :class:`Dimension` (innermost first), as in ASTRA-sim; the
formulas of each algorithm live in :mod:`simtrain.cost.collective_algorithms`. Per-step latency is
``latency_scale × link latency + step_overhead_s``; bandwidth is ``bandwidth_fraction × per-direction
bandwidth`` (the device's ``Efficiency.link_bandwidth_fraction``); one ``base_latency_s`` is paid per
collective (NCCL's base latency, [NCCL-TUNE]).

Algorithm selection (``algorithm=None``): the minimum predicted time among the candidates valid on the
topology. The default candidates are the ones NCCL implements — ring, (double binary) tree, in-network
(NVLS / SHARP / SwarmX, where a dimension supports it) and, across tiers, hierarchical — plus
``multi_axis`` on tori and ``direct`` for all-to-all (NCCL's all-to-all is direct point-to-point). With
that rule the choice flips from tree to ring as the message grows, as NCCL's tuner does. Recursive
halving-doubling (``rhd``) and one-shot ``direct`` are MPI / custom-kernel algorithms: forced by name
or listed in ``candidates``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from types import MappingProxyType

from simtrain.cost import collective_algorithms as _alg
from simtrain.cost.cost import Cost
from simtrain.errors import MissingRuleError, SpecError

__all__ = [
    "CollectiveKind", "Dimension", "LogicalTopology", "CollectiveResult", "collective_time",
    "bus_bandwidth_factor", "algbw_bytes_per_s", "busbw_bytes_per_s", "seconds_from_busbw",
    "ALGORITHMS", "AUTO_CANDIDATES", "DIMENSION_KINDS", "DEFAULT_BASE_LATENCY_S",
]

#: NCCL's ring base latency for the low-latency protocol, 6.6 µs [NCCL-TUNE, hardware.md §9b];
#: ``group_topology`` uses it unless the device's efficiency says ``collective_base_latency_s``.
DEFAULT_BASE_LATENCY_S = 6.6e-6
DIMENSION_KINDS = ("switch", "mesh", "ring", "tree")


class CollectiveKind(str, Enum):
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND_RECV = "send_recv"

    def __str__(self) -> str:
        return self.value


ALGORITHMS = ("ring", "tree", "rhd", "direct", "in_network", "hierarchical", "multi_axis")
AUTO_CANDIDATES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "in_network", "hierarchical", "multi_axis"),
    "reduce_scatter": ("ring", "in_network", "hierarchical", "multi_axis"),
    "all_gather": ("ring", "in_network", "hierarchical", "multi_axis"),
    "all_to_all": ("direct", "hierarchical"),
    "broadcast": ("ring", "tree", "in_network", "hierarchical"),
    "reduce": ("ring", "tree", "in_network", "hierarchical"),
    "send_recv": ("direct",),
}
_ALIASES = {
    "allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
    "alltoall": "all_to_all", "sendrecv": "send_recv", "p2p": "send_recv",
    "double_binary_tree": "tree", "recursive_halving_doubling": "rhd", "one_shot": "direct",
    "nvls": "in_network", "sharp": "in_network", "swarmx": "in_network", "dimension_ordered": "hierarchical",
}


def _word(text: str, field_name: str, allowed: Iterable[str]) -> str:
    if text.__class__ is str and text in allowed:  # fast path: already a canonical name
        return text
    key = str(getattr(text, "value", text)).strip().lower().replace("-", "_")
    key = _ALIASES.get(key.replace("_", ""), _ALIASES.get(key, key))
    if key not in allowed:
        raise SpecError.one(None, field_name, f"unknown {field_name} {text!r}; expected one of {', '.join(allowed)}")
    return key


def _positive(value: float, name: str, allow_zero: bool = False) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise SpecError.one(None, name, f"must be a finite {'non-negative' if allow_zero else 'positive'} number, got {value!r}")
    return v


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Dimension:
    """One dimension of a logical topology: ``size`` ranks and what one rank can push into it.

    ``bandwidth_bytes_per_s`` is the per-rank, per-direction injection into the dimension (all its
    links together). ``ring_bandwidth_bytes_per_s`` is what a (multi-)ring gets (None: derived by kind:
    a switch gives the full port; a full mesh of k ranks 2⌊(k−1)/2⌋ links, Walecki's edge-disjoint
    Hamiltonian cycles each run both ways; a torus axis both neighbour links with a wraparound, one
    without). ``pair_bandwidth_bytes_per_s`` is one rank to one peer while every rank is busy (None: the
    port on a switch, one link on a mesh or ring). ``tier`` names the link for byte accounting.
    """

    size: int
    bandwidth_bytes_per_s: float
    latency_s: float
    kind: str = "switch"
    tier: str = "link"
    ring_bandwidth_bytes_per_s: float | None = None
    pair_bandwidth_bytes_per_s: float | None = None
    wraparound: bool = True
    in_network_reduction: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise SpecError.one(None, "dimension.size", f"must be a positive integer, got {self.size!r}")
        bw = _positive(self.bandwidth_bytes_per_s, "dimension.bandwidth_bytes_per_s")
        _positive(self.latency_s, "dimension.latency_s", allow_zero=True)
        if self.kind not in DIMENSION_KINDS:
            raise SpecError.one(None, "dimension.kind", f"must be one of {', '.join(DIMENSION_KINDS)}, got {self.kind!r}")
        pair, ring = self.pair_bandwidth_bytes_per_s, self.ring_bandwidth_bytes_per_s
        k = self.size
        if pair is None:
            pair = bw / max(1, k - 1) if self.kind == "mesh" else bw / 2 if self.kind == "ring" else bw
            object.__setattr__(self, "pair_bandwidth_bytes_per_s", pair)
        if ring is None:
            if self.kind == "mesh":
                ring = pair * (2 * ((k - 1) // 2) if k > 2 else 1)
            elif self.kind == "ring":
                ring = 2 * pair if self.wraparound and k > 2 else pair
            else:
                ring = bw
            object.__setattr__(self, "ring_bandwidth_bytes_per_s", ring)
        _positive(self.pair_bandwidth_bytes_per_s, "dimension.pair_bandwidth_bytes_per_s")
        _positive(self.ring_bandwidth_bytes_per_s, "dimension.ring_bandwidth_bytes_per_s")


@dataclass(frozen=True, slots=True)
class LogicalTopology:
    """The dimensions a parallel group spans (innermost first) and the software costs on top."""

    dims: tuple[Dimension, ...]
    base_latency_s: float = 0.0
    step_overhead_s: float = 0.0
    bandwidth_fraction: float = 1.0
    latency_scale: float = 1.0
    name: str = ""
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _ranks: int = field(default=1, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dims = tuple(self.dims)
        if not all(isinstance(d, Dimension) for d in dims):
            raise SpecError.one(None, "topology.dims", "every dimension must be a Dimension")
        object.__setattr__(self, "dims", dims)
        _positive(self.base_latency_s, "topology.base_latency_s", allow_zero=True)
        _positive(self.step_overhead_s, "topology.step_overhead_s", allow_zero=True)
        if not 0 < self.bandwidth_fraction <= 1:
            raise SpecError.one(None, "topology.bandwidth_fraction", f"must be in (0, 1], got {self.bandwidth_fraction!r}")
        _positive(self.latency_scale, "topology.latency_scale")
        object.__setattr__(self, "_ranks", math.prod(d.size for d in dims))
        object.__setattr__(self, "_hash", hash((dims, self.base_latency_s, self.step_overhead_s,
                                                self.bandwidth_fraction, self.latency_scale, self.name)))

    def __hash__(self) -> int:  # cached: topologies are dictionary keys on the estimator's hot path
        return self._hash

    @classmethod
    def single(cls, size: int, bandwidth_bytes_per_s: float, latency_s: float, kind: str = "switch",
               tier: str = "link", **topology_fields) -> LogicalTopology:
        """A one-dimension topology (tests, quick what-ifs)."""
        return cls((Dimension(size, bandwidth_bytes_per_s, latency_s, kind, tier),), **topology_fields)

    @property
    def ranks(self) -> int:
        return self._ranks

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(d.tier for d in self.dims)


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One collective on one group: time, its α and β parts, steps, messages, bytes per tier.

    ``bytes_sent_per_rank`` maps a tier (link name) to the bytes one rank's port carries in the busier
    direction (for rooted collectives, the root's). ``steps`` counts sequential communication steps,
    ``messages`` the point-to-point transfers of all ranks together.
    """

    kind: str
    algorithm: str
    ranks: int
    message_bytes: float
    seconds: float
    latency_s: float
    bandwidth_s: float
    steps: int
    messages: int
    bytes_sent_per_rank: Mapping[str, float]
    detail: str = ""

    @property
    def algbw_bytes_per_s(self) -> float:
        return algbw_bytes_per_s(self.message_bytes, self.seconds)

    @property
    def busbw_bytes_per_s(self) -> float:
        return busbw_bytes_per_s(self.kind, self.message_bytes, self.seconds, self.ranks)

    def cost(self) -> Cost:
        """The collective as a :class:`Cost` (seconds and bytes per link tier)."""
        return Cost(seconds=self.seconds, link_bytes=self.bytes_sent_per_rank)


# ----------------------------------------------------------------------------------------------
# nccl-tests bus-bandwidth conventions [NCCL-PERF]
# ----------------------------------------------------------------------------------------------
def bus_bandwidth_factor(kind: str | CollectiveKind, ranks: int) -> float:
    """busbw / algbw: 2(n−1)/n for all-reduce; (n−1)/n for reduce-scatter, all-gather, all-to-all;
    1 for broadcast, reduce and send/recv (nccl-tests ``doc/PERFORMANCE.md``)."""
    kind = _word(kind, "kind", AUTO_CANDIDATES)
    n = int(ranks)
    if n < 1:
        raise SpecError.one(None, "ranks", f"must be >= 1, got {ranks!r}")
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


def algbw_bytes_per_s(message_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t (infinite for a zero-time collective)."""
    return math.inf if seconds <= 0 else message_bytes / seconds


def busbw_bytes_per_s(kind: str | CollectiveKind, message_bytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth = algbw × :func:`bus_bandwidth_factor` (0 for a single rank)."""
    factor = bus_bandwidth_factor(kind, ranks)
    return 0.0 if factor == 0 else algbw_bytes_per_s(message_bytes, seconds) * factor


def seconds_from_busbw(kind: str | CollectiveKind, message_bytes: float, busbw: float, ranks: int) -> float:
    """The inverse: t = S × factor / busbw (what a measured busbw predicts for another size)."""
    return message_bytes * bus_bandwidth_factor(kind, ranks) / _positive(busbw, "busbw")


# ----------------------------------------------------------------------------------------------
# Time of a collective
# ----------------------------------------------------------------------------------------------
_CHUNKED = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
"""Collectives whose message is split n ways per step (ring / pairwise: one S/n chunk per rank)."""


def collective_time(kind: str | CollectiveKind, message_bytes: float, topology: LogicalTopology,
                    algorithm: str | None = None, efficiency=None,
                    candidates: Iterable[str] | None = None) -> CollectiveResult:
    """Predicted time of one collective of ``message_bytes`` (nccl-tests' S) over ``topology``.

    ``algorithm`` forces one by name (a SpecError when it cannot run there); otherwise the fastest
    of ``candidates`` (default :data:`AUTO_CANDIDATES`) that is valid on the topology. ``efficiency``
    (an ``Efficiency`` spec) overrides the topology's bandwidth fraction and latency scale, and its
    ``extra`` may set ``collective_base_latency_s`` and ``collective_step_overhead_s``.
    """
    kind = _word(kind, "kind", AUTO_CANDIDATES)
    size = _positive(message_bytes, "message_bytes", allow_zero=True)
    alg = None if algorithm is None else _word(algorithm, "algorithm", ALGORITHMS)
    cands = None if candidates is None else tuple(_word(c, "candidates", ALGORITHMS) for c in candidates)
    f, scale = topology.bandwidth_fraction, topology.latency_scale
    base, overhead = topology.base_latency_s, topology.step_overhead_s
    fs: float | tuple[float, ...] = f
    if efficiency is not None:
        f, scale = efficiency.link_bandwidth_fraction, efficiency.link_latency_scale
        ramp = 1.0
        if efficiency.link_half_bytes and size > 0:
            # NCCL's ramp to its large-message bus bandwidth: it moves a collective as chunks of
            # S / n per rank and step, and a small chunk does not fill the link (protocol, channels)
            chunk = size / max(1, topology.ranks) if kind in _CHUNKED else size
            ramp = chunk / (chunk + efficiency.link_half_bytes)
        fs = f * ramp
        per_link = efficiency.link_fractions
        if per_link and any(d.tier in per_link for d in topology.dims):
            # a link with its own measured fraction (e.g. the inter-node network, components.md §4c)
            fs = tuple(per_link.get(d.tier, f) * ramp for d in topology.dims)
        base = efficiency.extra.get("collective_base_latency_s", base)
        overhead = efficiency.extra.get("collective_step_overhead_s", overhead)
    return _cached(kind, size, topology, alg, cands, fs, scale, base, overhead)


@lru_cache(maxsize=16384)
def _cached(kind, size, topology, alg, cands, f, scale, base, overhead) -> CollectiveResult:
    n = topology.ranks
    if n <= 1:
        return CollectiveResult(kind, "local", n, size, 0.0, 0.0, 0.0, 0, 0, _NO_BYTES, "one rank: nothing to send")
    view = _view(topology, f, scale, overhead)
    if alg is not None and not _alg.valid(kind, alg, view):
        raise SpecError.one(None, "algorithm", f"{alg!r} cannot run {kind} on dimensions "
                            f"{[(d.kind, d.size) for d in topology.dims]}")
    envelope = _envelope(view, kind, cands, alg)
    if not envelope:
        raise MissingRuleError(f"no collective algorithm can run {kind} on dimensions "
                               f"{list(zip(view.kinds, view.sizes, strict=True))} "
                               f"(candidates {alg or cands or AUTO_CANDIDATES[kind]})")
    est = min(envelope, key=lambda e: e[0] + e[1] * size)  # first listed wins ties
    lat, bw_s = est[0], est[1] * size
    per_tier: dict[str, float] = {}
    for d, b in zip((d for d in topology.dims if d.size > 1), est[4], strict=True):
        per_tier[d.tier] = per_tier.get(d.tier, 0.0) + b * size
    alg_name = est[5].split("[", 1)[0]
    return CollectiveResult(kind, alg_name, n, size, base + lat + bw_s, base + lat, bw_s, est[2], est[3],
                            MappingProxyType(per_tier), est[5])


_NO_BYTES: Mapping[str, float] = MappingProxyType({})


@lru_cache(maxsize=1024)
def _view(t: LogicalTopology, f: float | tuple[float, ...], scale: float, overhead: float) -> _alg.View:
    """Drop size-1 dimensions and apply the efficiency: B × f (one f, or one per dimension of ``t``),
    α × scale + per-step overhead."""
    fs = f if isinstance(f, tuple) else (f,) * len(t.dims)
    kept = [(d, fd) for d, fd in zip(t.dims, fs, strict=True) if d.size > 1]
    dims = [d for d, _ in kept]
    return _alg.View(tuple(d.size for d in dims), tuple(d.bandwidth_bytes_per_s * fd for d, fd in kept),
                     tuple(d.ring_bandwidth_bytes_per_s * fd for d, fd in kept),
                     tuple(d.pair_bandwidth_bytes_per_s * fd for d, fd in kept),
                     tuple(d.latency_s * scale + overhead for d in dims), tuple(d.kind for d in dims),
                     tuple(d.wraparound for d in dims), tuple(d.in_network_reduction for d in dims))


def _valid_names(view: _alg.View, kind: str, cands: tuple[str, ...] | None) -> tuple[str, ...]:
    key = ("valid", kind, cands)
    names = view.memo.get(key)
    if names is None:
        names = view.memo[key] = tuple(a for a in (AUTO_CANDIDATES[kind] if cands is None else cands)
                                       if _alg.valid(kind, a, view))
    return names


def _envelope(view: _alg.View, kind: str, cands: tuple[str, ...] | None, only: str | None = None) -> tuple:
    """Per-byte estimates (α part, β per byte, …) of every way to run ``kind`` on ``view``, with the
    dominated ones dropped. Every formula is α + S·β, so the fastest algorithm for any S is the
    minimum over this lower envelope; a hierarchical algorithm contributes one line per combination of
    its phases' own candidates (the sum of per-phase minima is the minimum over combinations)."""
    key = ("envelope", kind, cands, only)
    hit = view.memo.get(key)
    if hit is not None:
        return hit
    lines = []
    for name in ((only,) if only is not None else _valid_names(view, kind, cands)):
        if name != "hierarchical":
            lines.append(_alg.estimate(kind, name, 1.0, view))
            continue
        plan = _alg.hierarchical_plan(kind, view)
        options = [_envelope(view.sub(lo, hi), sub_kind, cands) for sub_kind, lo, hi, _, _ in plan]
        for combo in itertools.product(*options):
            lines.append(_alg.combine(list(zip(plan, combo, strict=True)), view.dims))
    hit = view.memo[key] = _undominated(lines)
    return hit


def _undominated(lines: list) -> tuple:
    """Drop a line when an earlier-or-equal one is no slower at every size (α and β both ≤)."""
    keep = []
    for i, e in enumerate(lines):
        if not any(o[0] <= e[0] and o[1] <= e[1] and (o[0] < e[0] or o[1] < e[1] or j < i)
                   for j, o in enumerate(lines) if j != i):
            keep.append(e)
    return tuple(keep)
