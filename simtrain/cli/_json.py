"""Strict JSON for the command line: non-finite floats (NaN, ±inf) become ``null``.

``json.dumps`` would write ``NaN``/``Infinity``, which is not JSON and which strict parsers (jq,
JavaScript, Go) reject; ``allow_nan=False`` makes any that slip through an error instead.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

__all__ = ["finite", "dumps"]


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite real (Python or NumPy) replaced by None and NumPy numbers made
    Python ones, recursively."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, numbers.Integral):  # NumPy integers
        return int(obj)
    if isinstance(obj, numbers.Real):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj


def dumps(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj`` (other unknown objects are written with ``str``)."""
    return json.dumps(finite(obj), indent=indent, default=str, allow_nan=False)
