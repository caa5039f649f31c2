"""What the three framework importers share: a row of a mapping table (:class:`Setting`), the result
(:class:`Imported`), the builder an importer fills (:class:`Draft`), value parsers that raise a
:class:`~simtrain.errors.SpecError` naming the setting, and reading a text-or-path input.

Every importer puts each mapped setting into the config explicitly, given or not: a setting the user
left out takes the framework's documented default (listed in ``Imported.defaults``), so the stack
preset's own defaults (``Stack.zero_stage``, ``dp_overlap`` ...) never stand in for the framework's.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.stack import Stack, load_stack
from simtrain.specs.train import TrainConfig

__all__ = ["Setting", "Imported", "Draft", "read_source", "as_int", "as_float", "as_bool", "mapping_markdown",
           "NOT_READ", "unknown_reason", "ignored_reason"]

NOT_READ = "not read by simtrain: no effect on one step's time or memory, or not modelled"
"""Why an unknown setting is ignored (a setting an importer knows has its own reason)."""


def ignored_reason(name: str, noted: dict[str, str], known) -> str:
    """Why ``name`` is ignored: the reason ``noted`` gives it or a section above it (a dotted key's
    prefix), else :func:`unknown_reason`."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        reason = noted.get(".".join(parts[:end]))
        if reason:
            return reason
    return unknown_reason(name, known)


def unknown_reason(name: str, known) -> str:
    """:data:`NOT_READ`, with the known setting the name is nearly (a likely typo) when there is one."""
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.85)
    return NOT_READ + (f" (did you mean {near[0]!r}?)" if near else "")


@dataclass(frozen=True)
class Setting:
    """One row of a framework's mapping table (data; docs/frameworks.md prints these rows)."""

    name: str
    """The setting as the framework spells it (``--tensor-model-parallel-size``, ``parallelism.tensor_parallel_degree``)."""
    target: str
    """The TrainConfig field(s) it sets, ``stack.<knob>`` for a stack knob, or ``model`` for a model-shape setting."""
    how: str
    """The conversion, in words."""
    default: str
    """The framework's documented default, in words ("—" for a model-shape setting)."""
    source: str
    """Where that default is stated (file:line at the commit the module docstring names, or the doc page)."""
    kind: str = "int"
    """How the value parses: int, float, bool, str, flag (no value), list."""
    value: Any = None
    """The default as a Python value (None: none, or derived from other settings)."""


@dataclass(frozen=True)
class Imported:
    """A framework config read into simtrain's terms. ``config`` holds TrainConfig fields (every mapped
    setting, given or defaulted); ``stack`` the preset chosen, ``stack_overrides`` the knobs of it the
    framework settings change; ``model`` the model-shape settings found (not TrainConfig fields: check
    them against the model you estimate, :meth:`model_mismatches`); ``ignored`` (setting, why) for each
    setting given but not mapped; ``defaults`` the mapped settings taken from the framework's defaults."""

    framework: str
    config: dict[str, Any]
    stack: str
    model: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[tuple[str, str], ...] = ()
    defaults: tuple[str, ...] = ()
    stack_overrides: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    """The file read, or None for text / an argument list / a dict."""

    def stack_value(self) -> str | dict[str, Any]:
        """``TrainConfig.stack`` of the import: the preset name, or ``{preset: NAME, knob: value}``."""
        return {"preset": self.stack, **self.stack_overrides} if self.stack_overrides else self.stack

    def train_config(self, **overrides) -> TrainConfig:
        """The TrainConfig (with ``stack=`` set); ``overrides`` replace any field, ``stack`` included.
        A bad combination raises SpecError naming the field."""
        return TrainConfig.build(self.source, **{**self.config, "stack": self.stack_value(), **overrides})

    def model_mismatches(self, model) -> list[str]:
        """Where the model-shape settings found disagree with ``model`` (a simtrain Model): layers,
        attention heads, KV heads, experts. Empty when they agree or none was given."""
        facts = model.layout_facts()
        pairs = (("num_layers", "layers"), ("num_attention_heads", "heads"), ("num_query_groups", "kv_heads"),
                 ("num_experts", "experts"))
        out = []
        for mine, theirs in pairs:
            want, have = self.model.get(mine), facts.get(theirs)
            if want is not None and have is not None and int(want) != int(have):
                out.append(f"{self.framework} {mine}={want} but the model has {theirs}={have}")
        return out


@dataclass
class Draft:
    """The mutable builder an importer fills, frozen into an :class:`Imported` by :meth:`freeze`."""

    framework: str
    source: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)

    def ignore(self, name: str, why: str) -> None:
        self.ignored.append((name, why))

    def defaulted(self, name: str) -> None:
        if name not in self.defaults:
            self.defaults.append(name)

    def error(self, name: str, reason: str) -> SpecError:
        return SpecError.one(self.source, name, reason)

    def freeze(self, stack: str, rows: tuple[Setting, ...], given) -> Imported:
        """Validate and freeze. A TrainConfig validation error is re-issued naming the framework
        settings behind the fields it names (``rows``; the ones in ``given`` first)."""
        unknown = sorted(set(self.config) - set(TrainConfig.model_fields))
        bad_knobs = sorted(set(self.knobs) - set(Stack.model_fields))
        if unknown or bad_knobs:  # a mapping-table bug, not bad input
            raise AssertionError(f"not TrainConfig fields {unknown} / Stack knobs {bad_knobs}")
        preset = load_stack(stack)
        knobs = {k: v for k, v in self.knobs.items() if getattr(preset, k) != v}
        out = Imported(self.framework, dict(self.config), stack, dict(self.model), tuple(self.ignored),
                       tuple(self.defaults), knobs, self.source)
        try:
            out.train_config()
        except SpecError as err:
            names = _setting_names(rows, given)
            raise SpecError([_renamed(i, names) for i in err.issues]) from None
        return out


def _setting_names(rows: tuple[Setting, ...], given) -> dict[str, str]:
    """TrainConfig field → the framework setting behind it: a given one before a defaulted one, and a
    setting whose first target the field is before one that sets it on the side."""
    pairs = [(r.name not in given, i > 0, r.name, t) for r in rows for i, t in enumerate(r.target.split(", "))]
    names: dict[str, str] = {}
    for *_, name, target in sorted(pairs, key=lambda p: p[:2]):
        names.setdefault(target, name)
    return names


def _renamed(issue: SpecIssue, names: dict[str, str]) -> SpecIssue:
    """``issue`` with its field named as the framework settings behind it: the field's own, or for a
    cross-field problem every field its reason names."""
    fields = [issue.field.split(".")[0]] if issue.field else re.findall(r"[a-z][a-z0-9_]*", issue.reason)
    settings = list(dict.fromkeys(names[f] for f in fields if f in names))
    if not settings:
        return issue
    where = f" ({issue.field})" if issue.field else ""
    return SpecIssue(issue.file, ", ".join(settings) + where, issue.reason, issue.line)


def read_source(value, suffixes: tuple[str, ...], looks_like_text) -> tuple[str, str | None]:
    """(text, file) of ``value``: a path (str or Path) whose name ends in one of ``suffixes`` or that
    exists, or the text itself (``looks_like_text(value)`` True). A missing file is a SpecError."""
    if isinstance(value, Path) or (isinstance(value, str) and not looks_like_text(value)):
        path = Path(value)
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as err:
            raise SpecError.one(str(path)[:200], "", f"cannot read the file: {err.__class__.__name__}") from None
    if isinstance(value, str):
        return value, None
    raise SpecError.one(None, "", f"expected text or a path, got {type(value).__name__}")


def as_int(draft: Draft, name: str, value) -> int:
    """An integer setting: an int, or a string / float holding a whole number ("8", 5e8)."""
    if isinstance(value, bool):
        raise draft.error(name, f"expected an integer, got a boolean ({value})")
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise draft.error(name, f"expected an integer, got {str(value)[:40]!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise draft.error(name, f"expected an integer, got {str(value)[:40]!r}")
    return int(number)


def as_float(draft: Draft, name: str, value) -> float:
    if isinstance(value, bool):
        raise draft.error(name, f"expected a number, got a boolean ({value})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise draft.error(name, f"expected a number, got {str(value)[:40]!r}") from None
    if not math.isfinite(number):
        raise draft.error(name, f"expected a finite number, got {str(value)[:40]!r}")
    return number


def as_bool(draft: Draft, name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise draft.error(name, f"expected true or false, got {str(value)[:40]!r}")


def mapping_markdown(rows: tuple[Setting, ...]) -> str:
    """A markdown table of ``rows``: setting, TrainConfig target, conversion, default and its source."""
    lines = ["| setting | simtrain | conversion | framework default | source of the default |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = (f"`{r.name}`", f"`{r.target}`", r.how, r.default, r.source)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
