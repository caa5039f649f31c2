"""Worked numbers as code: a snippet is shown on the page and its value is what the page prints.

A :class:`Worked` holds the snippet (Python; its last line is an expression) and, optionally, the
source's own closed form (``paper``) evaluated independently of simtrain with the tolerance the two
must meet. :func:`value_of` runs a snippet in :func:`namespace`; :func:`block` renders it with a
machine-readable marker ``<!-- worked KEY = REPR -->`` that ``tests/unit/test_docs_formulas.py`` and
``test_docs_seed.py`` parse back and re-evaluate.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass

__all__ = ["Worked", "namespace", "value_of", "paper_of", "block", "fmt", "MARKER", "parse_markers"]

MARKER = re.compile(r"<!-- worked (?P<key>[a-z0-9-]+) = (?P<value>\S+) -->")


@dataclass(frozen=True)
class Worked:
    key: str
    code: str
    """simtrain snippet; its last line is an expression, the worked number."""
    unit: str = ""
    paper: str | None = None
    """The source's closed form, plain Python over the names in ``given`` (no simtrain)."""
    given: str = ""
    """Assignments the paper expression uses, e.g. ``s, h = 2048, 12288``."""
    rel: float = 1e-9
    """How close simtrain and the closed form must be (relative)."""
    note: str = ""


@functools.cache
def namespace() -> dict:
    """Names a snippet may use: simtrain and the small helpers of :mod:`validation.docs_gen.fixtures`."""
    import simtrain as st
    import validation.docs_gen.fixtures as fixtures
    ns = {"st": st, "math": math}
    for module in fixtures.IMPORTS:
        ns.update({name: getattr(module, name) for name in module.__all__})
    ns.update({name: getattr(fixtures, name) for name in fixtures.__all__ if name != "IMPORTS"})
    return ns


def _run(code: str, ns: dict):
    tree = ast.parse(code)
    *body, last = tree.body
    if not isinstance(last, ast.Expr):
        raise ValueError(f"the last line of a snippet must be an expression: {code!r}")
    scope = dict(ns)
    exec(compile(ast.Module(body=body, type_ignores=[]), "<snippet>", "exec"), scope)  # noqa: S102
    return eval(compile(ast.Expression(last.value), "<snippet>", "eval"), scope)  # noqa: S307


def value_of(w: Worked):
    """The snippet's value (cached per key: a page and its test evaluate each once)."""
    return _cached(w.key, w.code)


@functools.cache
def _cached(key: str, code: str):
    return _run(code, namespace())


def paper_of(w: Worked):
    """The closed form's value, or None."""
    if w.paper is None:
        return None
    return _run(f"{w.given}\n{w.paper}" if w.given else w.paper, {"math": math})


def fmt(value, unit: str = "") -> str:
    """A number for people: integers with thousands separators, others to 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = str(value)
    elif float(value).is_integer() and abs(value) < 1e16:
        text = f"{int(value):,}"
    elif value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        mant, exp = f"{value:.4e}".split("e")
        text = f"{float(mant):.4g}·10^{int(exp)}"
    else:
        text = f"{value:.4g}"
    return f"{text} {unit}".rstrip()


def block(w: Worked) -> str:
    """The snippet, its value and (when given) the closed form beside it, as markdown."""
    value = value_of(w)
    lines = ["```python", w.code.strip(), "```", f"<!-- worked {w.key} = {value!r} -->",
             f"→ **{fmt(value, w.unit)}**"]
    paper = paper_of(w)
    if paper is not None:
        ratio = value / paper if paper else math.nan
        same = "equal" if math.isclose(value, paper, rel_tol=1e-12) else f"simtrain / closed form = {ratio:.4f}"
        lines[-1] += f"; the closed form `{w.paper}` with `{w.given}` gives {fmt(paper, w.unit)} ({same})"
    if w.note:
        lines.append("")
        lines.append(w.note)
    return "\n".join(lines)


def parse_markers(text: str) -> dict[str, float]:
    """{key: value} of every ``<!-- worked KEY = VALUE -->`` marker on a page."""
    out = {}
    for m in MARKER.finditer(text):
        raw = m.group("value")
        out[m.group("key")] = ast.literal_eval(raw) if raw not in ("nan", "inf") else float(raw)
    return out
