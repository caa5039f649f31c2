"""The Cost algebra: one frozen record with zero(), + and scalar *, so that
"per layer × layers × micro-batches" is one expression."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Cost"]


def _merge(a: Mapping[str, float], b: Mapping[str, float]) -> Mapping[str, float]:
    if not a:
        return b
    if not b:
        return a
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return MappingProxyType(out)


_EMPTY: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Cost:
    """FLOPs, bytes per memory tier, bytes per link (or link tier) and seconds of one piece of work."""

    flops: float = 0.0
    seconds: float = 0.0
    memory_bytes: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    link_bytes: Mapping[str, float] = field(default_factory=lambda: _EMPTY)

    @staticmethod
    def zero() -> Cost:
        return _ZERO

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.flops + other.flops, self.seconds + other.seconds,
                    _merge(self.memory_bytes, other.memory_bytes), _merge(self.link_bytes, other.link_bytes))

    def __radd__(self, other: object) -> Cost:
        if other == 0:  # so sum() works
            return self
        return NotImplemented

    def __mul__(self, k: float) -> Cost:
        if not isinstance(k, (int, float)):
            return NotImplemented
        return Cost(self.flops * k, self.seconds * k,
                    MappingProxyType({n: v * k for n, v in self.memory_bytes.items()}),
                    MappingProxyType({n: v * k for n, v in self.link_bytes.items()}))

    __rmul__ = __mul__

    @property
    def total_memory_bytes(self) -> float:
        return sum(self.memory_bytes.values())

    @property
    def total_link_bytes(self) -> float:
        return sum(self.link_bytes.values())


_ZERO = Cost()
