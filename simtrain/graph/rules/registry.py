"""The rule registry: one function per op kind turns a few shape parameters into an :class:`Op`.

A rule is a pure function of keyword parameters that returns the fields of an :class:`Op` other
than ``name``/``kind``/``block`` (a :class:`dict`). :func:`make_op` looks the rule up, calls it and
applies the options every rule shares:

* ``tp_split`` — how tensor parallelism splits the op (the rule supplies a default);
* ``input_saved_by`` — the tensor this op would keep as its *input* for backward is the same storage
  another op of the block already keeps (e.g. ``conv2`` saves the output of an in-place ``relu``
  that the relu keeps too; flash attention's output that the out-projection saves). PyTorch holds
  that storage once, so the op's ``saved.act`` drops its input part and the attribute names the op
  (relative to the block) that counts it;
* ``dtype`` — the dtype the op is described in.

An unknown kind raises :class:`~simtrain.errors.MissingRuleError`: an op with no rule is never free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simtrain.errors import MissingRuleError, SpecError
from simtrain.glossary import DType
from simtrain.graph.op import Op, Saved

__all__ = ["rule", "make_op", "registered_kinds", "get_rule", "RuleFn"]

RuleFn = Callable[..., dict[str, Any]]
_RULES: dict[str, RuleFn] = {}


def rule(*kinds: str) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the rule of each of ``kinds`` (``@rule("matmul", "bmm")``)."""
    def register(fn: RuleFn) -> RuleFn:
        for kind in kinds:
            if kind in _RULES:
                raise ValueError(f"rule for op kind {kind!r} registered twice")
            _RULES[kind] = fn
        return fn
    return register


def registered_kinds() -> tuple[str, ...]:
    return tuple(sorted(_RULES))


def get_rule(kind: str) -> RuleFn:
    try:
        return _RULES[kind]
    except KeyError:
        known = ", ".join(registered_kinds())
        raise MissingRuleError(f"no cost rule for op kind {kind!r} (known: {known})") from None


def _call(fn: RuleFn, kind: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        return fn(**params)
    except TypeError as err:  # unknown or missing parameter: bad input, not a crash
        raise SpecError.one(None, name, f"op kind {kind!r}: {err}") from None
    except ValueError as err:
        if isinstance(err, SpecError):
            raise
        raise SpecError.one(None, name, f"op kind {kind!r}: {err}") from None


def _drop_saved_input(fields: dict[str, Any], source: str, name: str) -> dict[str, Any]:
    """Remove the input part of ``saved.act``: another op keeps that storage."""
    attrs = dict(fields.get("attrs", ()))
    n = attrs.get("saved_input_elements")
    if n is None:
        raise SpecError.one(None, name, "input_saved_by given but this op kind does not save its input")
    saved: Saved = fields["saved"]
    fields["saved"] = Saved(saved.act - n, saved.mask, saved.fixed_bytes)
    attrs["saved_input_elements"] = 0
    attrs["input_saved_by"] = source
    fields["attrs"] = tuple(sorted(attrs.items()))
    return fields


def make_op(kind: str, name: str, block: str, *, tp_split: str | None = None,
            input_saved_by: str | None = None, dtype: DType | str | None = None, **params: Any) -> Op:
    """Build the :class:`Op` of ``kind`` named ``name`` in pipeline block ``block``.

    ``params`` go to the rule (per-sample shapes); see the module docstring for the shared options.
    """
    fields = _call(get_rule(kind), kind, name, params)
    if input_saved_by is not None:
        fields = _drop_saved_input(fields, input_saved_by, name)
    op = Op(name=name, kind=kind, block=block, **fields)
    changes: dict[str, Any] = {}
    if tp_split is not None:
        changes["tp_split"] = tp_split
    if dtype is not None:
        changes["dtype"] = DType(dtype)
    return replace(op, **changes) if changes else op
