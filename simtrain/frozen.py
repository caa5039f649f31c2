"""A read-only dict for result records: immutable like ``types.MappingProxyType``, but a real ``dict``
subclass, so ``json.dumps`` and pandas take it as it is (issue 40: JSON-safe plain types in every
result)."""

from __future__ import annotations

__all__ = ["FrozenDict"]


class FrozenDict(dict):
    """A dict that refuses every change after construction."""

    __slots__ = ()

    def _refuse(self, *_args, **_kwargs):
        raise TypeError(f"{type(self).__name__} is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self):  # pickled (Dask, multiprocessing) and copied as a new one, not by item assignment
        return type(self), (dict(self),)

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"
