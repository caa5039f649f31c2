"""Building blocks of every spec: a strict frozen base model, unit-parsed quantity types, and
``Sourced`` numbers (value + citation + verification mark)."""

from __future__ import annotations

import functools
import types
from typing import Annotated, Any, ClassVar, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from simtrain.errors import SpecError, SpecIssue
from simtrain.glossary import Mark
from simtrain.specs.reading import CLIP_CHARS, clip, clip_quoted
from simtrain.units import Dimension, UnitError, parse_quantity

__all__ = [
    "Spec", "Sourced", "Bytes", "BytesPerS", "FlopsPerS", "Seconds", "Watts", "Hertz",
    "DollarsPerHour", "OpsPerS", "spec_error_from_validation", "positive", "nonneg", "iter_sourced",
    "register_schema", "schema_for",
]

T = TypeVar("T")


class _FriendlyConstruction(type(BaseModel)):
    """Direct construction — ``st.TrainConfig(micro_batchsize=1)``, ``st.TrainConfig(tp=0)`` — raises a
    :class:`SpecError` (a ValueError) naming each field, what is wrong and the nearest valid name, not
    pydantic's ValidationError with its URLs. Validation through ``model_validate`` (the spec loader,
    a spec nested in another) is pydantic's own, so a nested problem keeps its full path."""

    def __call__(cls, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as err:
            raise spec_error_from_validation(err, None) from None


class Spec(BaseModel, metaclass=_FriendlyConstruction):
    """Strict, frozen, no unknown keys. Validators check; they never rewrite input."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False, validate_default=True, allow_inf_nan=False,
                              arbitrary_types_allowed=False, use_enum_values=False)

    #: the library folder kind ("device", "link", ...) of specs that live in their own file; None inline
    library_kind: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("library_kind") is not None:
            register_schema(cls.__dict__["library_kind"])(cls)

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value, info):
        """A name or text that reaches a terminal or a report must not carry escape sequences: a spec
        could otherwise forge report lines or recolour the terminal. Names take none; other text may
        hold newlines and tabs (YAML block scalars)."""
        if isinstance(value, str):
            allowed = "" if info.field_name == "name" else "\n\t"
            bad = next((c for c in value if _is_control(c) and c not in allowed), None)
            if bad is not None:
                raise ValueError(f"contains the control character {bad!r}; {info.field_name} must be printable text")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value, info):
        """``devices_count: true`` is not 1: a boolean where only a number fits is an error, not a cast."""
        if isinstance(value, bool) and info.field_name and _number_not_bool(cls, info.field_name):
            raise ValueError(f"expected a number, got a boolean ({str(value).lower()})")
        return value


def _is_control(c: str) -> bool:
    """C0 / C1 control characters and DEL (what a terminal acts on), and the bidirectional overrides."""
    o = ord(c)
    return o < 0x20 or 0x7F <= o <= 0x9F or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069


_SCHEMAS: dict[str, type] = {}


def register_schema(kind: str):
    """Class decorator: ``kind`` files (``spec: kind``) validate against this class. Spec classes with a
    ``library_kind`` register themselves; the loader looks them up here instead of importing them."""
    def register(cls: type) -> type:
        _SCHEMAS[kind] = cls
        return cls
    return register


def schema_for(kind: str) -> type | None:
    return _SCHEMAS.get(kind)


@functools.cache
def _number_not_bool(cls: type, field: str) -> bool:
    """Whether the field ``field`` of ``cls`` takes an int or float but not a bool."""
    info = cls.model_fields.get(field)
    if info is None:
        return False
    kinds, todo = set(), [info.annotation]
    while todo:
        t = todo.pop()
        origin = get_origin(t)
        if origin is Annotated or origin is Union or origin is types.UnionType:
            todo.extend(get_args(t)[:1] if origin is Annotated else get_args(t))
        else:
            kinds.add(t)
    return bool(kinds & {int, float}) and not kinds & {bool, Any, object}


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
            text = str(item)
            parts.append(("." if parts else "") + (text if len(text) <= CLIP_CHARS else text[:CLIP_CHARS - 3] + "…"))
    return "".join(parts)


#: the most issues one error lists; the rest are counted in a last line
MAX_ISSUES = 100


def _clip_input(msg: str, value: object) -> str:
    """``msg`` with any long rendering of the offending input cut to a short ``repr`` (pydantic's
    ``input_value`` itself is never shown)."""
    if value is not None and not isinstance(value, bool):
        try:
            renderings = dict.fromkeys((repr(value), str(value)))
        except (ValueError, RecursionError):  # an integer too long to print, a recursive structure
            renderings = {}
        for text in renderings:
            if len(text) > CLIP_CHARS and text in msg:
                msg = msg.replace(text, clip(value))
    return clip_quoted(msg)


def _spec_classes(cls=None):
    for sub in (cls or Spec).__subclasses__():
        yield sub
        yield from _spec_classes(sub)


def _nearest_field(title: str, field: str) -> str:
    """"; did you mean 'x'?" for an unknown key of the spec class named ``title`` (pydantic's error
    title), from that class's fields; "" when none is near."""
    import difflib
    key = field.rsplit(".", 1)[-1]
    for cls in _spec_classes():
        if cls.__name__ == title:
            near = difflib.get_close_matches(key, list(cls.model_fields), n=1, cutoff=0.6)
            return f"; did you mean {near[0]!r}?" if near else ""
    return ""


def spec_error_from_validation(err: ValidationError, file: str | None, prefix: str = "") -> SpecError:
    """Turn pydantic's error into ours: one :class:`SpecIssue` per problem, field path dotted. The
    input value is not quoted; where a validator's message repeats it, only a clipped ``repr`` stays."""
    issues = []
    for e in err.errors(include_url=False):
        field = _loc(tuple(e.get("loc", ())))
        if prefix:
            field = f"{prefix}.{field}" if field else prefix
        msg = _clip_input(e.get("msg", "invalid"), e.get("input"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if e.get("type") == "extra_forbidden":
            msg = "unknown key (not a field of this spec)" + _nearest_field(err.title, field)
        elif e.get("type") in ("model_type", "model_attributes_type"):
            got = type(e.get("input")).__name__
            msg = (f"expected a mapping {{value: ..., source: ..., mark: ...}} (a number with its source), got {got}"
                   if "Sourced" in msg else f"expected a mapping of fields, got {got}")
        issues.append(SpecIssue(file, field, msg))
        if len(issues) == MAX_ISSUES and err.error_count() > MAX_ISSUES:
            issues.append(SpecIssue(file, "", f"... and {err.error_count() - MAX_ISSUES} more problems"))
            break
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
