"""Building blocks of every spec: a strict frozen base model, unit-parsed quantity types, and
``Sourced`` numbers (value + citation + verification mark)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from simtrain.errors import SpecError, SpecIssue
from simtrain.glossary import Mark
from simtrain.units import Dimension, UnitError, parse_quantity

__all__ = [
    "Spec", "Sourced", "Bytes", "BytesPerS", "FlopsPerS", "Seconds", "Watts", "Hertz",
    "DollarsPerHour", "OpsPerS", "spec_error_from_validation", "positive", "nonneg", "iter_sourced",
]

T = TypeVar("T")


class Spec(BaseModel):
    """Strict, frozen, no unknown keys. Validators check; they never rewrite input."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False, validate_default=True,
                              arbitrary_types_allowed=False, use_enum_values=False)

    #: the library folder kind ("device", "link", ...) of specs that live in their own file; None inline
    library_kind: ClassVar[str | None] = None


def _quantity(dim: Dimension):
    def parse(value: object) -> float:
        try:
            return parse_quantity(value, dim)
        except UnitError as err:
            raise ValueError(str(err)) from None
    return BeforeValidator(parse)


def positive(dim: Dimension):
    return Annotated[float, _quantity(dim), Field(gt=0)]


def nonneg(dim: Dimension):
    return Annotated[float, _quantity(dim), Field(ge=0)]


Bytes = positive(Dimension.BYTES)
BytesPerS = positive(Dimension.BYTES_PER_S)
FlopsPerS = positive(Dimension.FLOPS_PER_S)
OpsPerS = positive(Dimension.OPS_PER_S)
Seconds = nonneg(Dimension.SECONDS)
Watts = positive(Dimension.WATTS)
Hertz = positive(Dimension.HERTZ)
DollarsPerHour = nonneg(Dimension.DOLLARS_PER_HOUR)


class Sourced(Spec, Generic[T]):
    """A number with where it came from. ``source`` is a key from shared/reference/hardware.md §0
    (or a measurement / calibration id); ``mark`` says how well it is backed (U = unverified)."""

    value: T
    source: Annotated[str, Field(min_length=2, max_length=300)]
    mark: Mark = Mark.V2
    note: str | None = None


def _loc(loc: tuple) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item).startswith(("function-", "constrained-", "tagged-union")):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def spec_error_from_validation(err: ValidationError, file: str | None, prefix: str = "") -> SpecError:
    """Turn pydantic's error into ours: one :class:`SpecIssue` per problem, field path dotted."""
    issues = []
    for e in err.errors(include_url=False):
        field = _loc(tuple(e.get("loc", ())))
        if prefix:
            field = f"{prefix}.{field}" if field else prefix
        msg = e.get("msg", "invalid")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if e.get("type") == "extra_forbidden":
            msg = "unknown key (not a field of this spec)"
        elif e.get("type") in ("model_type", "model_attributes_type"):
            got = type(e.get("input")).__name__
            msg = (f"expected a mapping {{value: ..., source: ..., mark: ...}} (a number with its source), got {got}"
                   if "Sourced" in msg else f"expected a mapping of fields, got {got}")
        issues.append(SpecIssue(file, field, msg))
    return SpecError(issues)


def iter_sourced(spec: BaseModel, prefix: str = "", *, into_refs: bool = True):
    """Every :class:`Sourced` number inside ``spec``, as ``(dotted field path, Sourced)``, in field order.

    Walks nested specs, lists and dicts. ``into_refs=False`` stops at nested specs that live in their
    own library file (``library_kind`` set: a node's device, a fabric's link), so each number is
    reported once, by the file that states it.
    """
    if isinstance(spec, Sourced):
        yield prefix, spec
        return
    for key in type(spec).model_fields:
        yield from _iter_value(getattr(spec, key), f"{prefix}.{key}" if prefix else key, into_refs)


def _iter_value(value, path: str, into_refs: bool):
    if isinstance(value, BaseModel):
        if into_refs or getattr(value, "library_kind", None) is None:
            yield from iter_sourced(value, path, into_refs=into_refs)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _iter_value(v, f"{path}.{k}", into_refs)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _iter_value(v, f"{path}[{i}]", into_refs)
