"""Small helpers shared by the rule modules (validation of shape parameters, products)."""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

from simtrain.graph.op import PhaseCounts

__all__ = ["pos_int", "nonneg_int", "prob", "as_shape", "elements", "pc", "attrs_of"]


def pos_int(label: str, value: object) -> int:
    """``value`` as a positive int, or ValueError naming ``label``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be a positive integer, got {value!r}")
    return value


def nonneg_int(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{label} must be a non-negative integer, got {value!r}")
    return value


def prob(label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{label} must be a probability in [0, 1), got {value!r}")
    return float(value)


def as_shape(label: str, value: Iterable[int] | int) -> tuple[int, ...]:
    """A per-sample shape: a tuple of positive ints (an int is a 1-d shape)."""
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not dims:
        raise ValueError(f"{label} must have at least one dimension")
    return tuple(pos_int(f"{label}[{i}]", d) for i, d in enumerate(dims))


def elements(shape: tuple[int, ...]) -> int:
    return prod(shape)


def pc(fw: float = 0.0, agrad: float = 0.0, wgrad: float = 0.0) -> PhaseCounts:
    return PhaseCounts(float(fw), float(agrad), float(wgrad))


def attrs_of(**kv: object) -> tuple[tuple[str, object], ...]:
    """Attributes as the sorted tuple an :class:`Op` stores (so equal math gives equal records)."""
    return tuple(sorted((k, v) for k, v in kv.items() if v is not None))
