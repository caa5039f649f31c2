"""Loading spec files: YAML → validated, frozen spec objects, with errors that name file and field.

Every spec file starts with ``spec: device | link | node | cluster | model | job`` so that any file can
be checked on its own (``simtrain check FILE``). Names resolve against the library folders
(``hardware_specs/{devices,links,nodes,clusters}``, ``workloads/{models,jobs}``); a value ending in
``.yaml``/``.yml`` or containing a path separator is read as a path instead.

Spec files are untrusted input. Files are read by :mod:`simtrain.specs.reading` (regular files
only, size-capped, bounded YAML, duplicate keys refused). A path the user gives directly (command
line, ``load_*``) may be anything; a path written *inside* a spec file (a reference) must be relative
to that file and stay in its folder or the library (:func:`resolve_reference`).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.base import schema_for, spec_error_from_validation
from simtrain.specs.reading import read_yaml_file
from simtrain.specs.references import (
    HARDWARE_DIR,
    REFERRER,
    REPO_ROOT,
    WORKLOADS_DIR,
    library_names,
    library_path,
    referring_file,
    resolve_reference,
)

__all__ = [
    "REPO_ROOT", "HARDWARE_DIR", "WORKLOADS_DIR", "read_yaml", "read_spec_document", "library_names",
    "library_path", "load_device", "load_link", "load_node", "load_cluster", "load_efficiency_default",
    "validate_document", "SPEC_KINDS", "resolve_reference", "load_reference",
    "referring_file",
]

SPEC_KINDS = ("device", "link", "node", "cluster", "efficiency", "model", "job")
_LINES: dict[str, dict[str, int]] = {}  # file -> {field path: line} of its last read (64 most recent)
_LINES_LOCK = threading.Lock()


def _key(file: str | os.PathLike) -> str:
    return os.fspath(Path(file))


def read_yaml(path: Path) -> Any:
    """Read one YAML document safely (:mod:`simtrain.specs.reading`: regular files only, at most
    ``MAX_SPEC_BYTES``, C loader, alias / depth bounds, duplicate keys refused); missing, unreadable,
    empty or broken files are a SpecError naming the file (and line)."""
    name = os.fspath(path)
    doc, lines = read_yaml_file(name)
    if doc is None:
        raise SpecError.one(name, "", "empty file")
    with _LINES_LOCK:
        _LINES[_key(name)] = lines
        while len(_LINES) > 64:
            _LINES.pop(next(iter(_LINES)))
    return doc


_KIND_WORD = re.compile(r"[A-Za-z0-9_-]{1,16}")  # a short word is quoted back ("gpu"); anything else is not


def read_spec_document(path: Path, expected: str | None = None) -> tuple[str, dict]:
    """Return (spec kind, body) of a spec file, checking the ``spec:`` header. A file without one is
    "not a spec file" and nothing of it is quoted."""
    doc, name, kinds = read_yaml(path), os.fspath(path), ", ".join(SPEC_KINDS)
    if not isinstance(doc, dict):
        raise SpecError.one(name, "", f"not a spec file: expected a mapping at the top level with a "
                            f"'spec:' header ({kinds}), got {type(doc).__name__}")
    kind = doc.get("spec")
    if kind not in SPEC_KINDS:
        got = ("no 'spec:' header" if "spec" not in doc else
               f"got {kind!r}" if isinstance(kind, str) and _KIND_WORD.fullmatch(kind) else f"got a {type(kind).__name__}")
        raise SpecError([SpecIssue(name, "spec", f"not a spec file: 'spec' must be one of {kinds}; {got}",
                                   _LINES.get(_key(name), {}).get("spec"))])
    if expected is not None and kind != expected:
        raise SpecError.one(name, "spec", f"expected a {expected} spec, got {kind!r}")
    body = {k: v for k, v in doc.items() if k != "spec"}
    return kind, body


def load_reference(kind: str, value: str | os.PathLike) -> Any:
    """Load the ``kind`` a spec file refers to, resolved by :func:`resolve_reference` against the file
    being validated (see :func:`validate_document`)."""
    return _load(kind, resolve_reference(kind, value, REFERRER.get()))


def _schema(kind: str) -> type[BaseModel]:
    """The schema class of a library kind, from the registry its module fills in when imported
    (:func:`simtrain.specs.base.register_schema`): this module never imports the schemas it loads."""
    cls = schema_for(kind)
    if cls is None and kind == "model":  # the model schema lives with the graph code
        from simtrain.graph.spec import ModelSpec  # noqa: F401  (registers "model")
        cls = schema_for(kind)
    elif cls is None and kind == "job":
        from simtrain.specs.job import Job  # noqa: F401  (registers "job")
        cls = schema_for(kind)
    if cls is None:
        raise SpecError.one(None, "spec", f"no schema registered for {kind!r}")
    return cls


def _line_of(lines: dict[str, int], field: str) -> int | None:
    while field:
        if field in lines:
            return lines[field]
        cut = max(field.rfind("."), field.rfind("["))
        field = field[:cut] if cut > 0 else ""
    return None


def _with_lines(err: SpecError, file: str | None) -> SpecError:
    """``err`` with the line of each issue's field where the file's YAML gave one."""
    lines = _LINES.get(_key(file), {}) if file else {}
    return SpecError([SpecIssue(i.file or file, i.field, i.reason,
                                i.line or (_line_of(lines, i.field) if (i.file or file) == file else None))
                      for i in err.issues])


def validate_document(kind: str, body: dict, file: str | None) -> BaseModel:
    """Validate a parsed document as ``kind``; errors name ``file``, the field path and its line.
    References to other files inside ``body`` resolve against ``file`` (:func:`resolve_reference`)."""
    token = REFERRER.set(os.fspath(file) if file is not None else None)
    try:
        return _schema(kind).model_validate(body)
    except ValidationError as err:
        raise _with_lines(spec_error_from_validation(err, file), file) from None
    except SpecError as err:  # a referenced file is broken: keep its own file and field
        raise _with_lines(err, file) from None
    finally:
        REFERRER.reset(token)


@functools.lru_cache(maxsize=512)
def _load_cached(kind: str, path: str, mtime_ns: int) -> BaseModel:
    _, body = read_spec_document(Path(path), expected=kind)
    return validate_document(kind, body, path)


def _load(kind: str, name_or_path: str | os.PathLike) -> Any:
    path = library_path(kind, name_or_path)
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise SpecError.one(str(path), "", "file not found") from None
    except (OSError, ValueError) as err:  # name too long, not a directory, ...
        raise SpecError.one(str(path), "", f"cannot read file: {getattr(err, 'strerror', None) or err}") from None
    return _load_cached(kind, str(path), mtime)


def load_device(name: str | os.PathLike):
    """A :class:`~simtrain.specs.hardware.Device` by library name (``"h100-sxm5-80gb"``) or path."""
    return _load("device", name)


def load_link(name: str | os.PathLike):
    return _load("link", name)


def load_node(name: str | os.PathLike):
    return _load("node", name)


def load_cluster(name: str | os.PathLike, nodes: int | None = None):
    """A cluster by name or path; ``nodes`` overrides the node count (``load_cluster("dgx-h100", nodes=4)``)."""
    cluster = _load("cluster", name)
    if nodes is not None and nodes != cluster.nodes_count:
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise SpecError.one(None, "nodes", f"must be a positive integer, got {nodes!r}")
        try:
            cluster = cluster.with_nodes(nodes)
        except ValidationError as err:  # the count asked for is wrong, not the cluster's file
            why = "; ".join(e.get("msg", "invalid") for e in err.errors(include_url=False))
            raise SpecError.one(None, "nodes", f"{nodes:,} nodes of {name!r}: {why}") from None
    return cluster


def load_efficiency_default(device_kind: str):
    """The documented default efficiency profile of a device kind (hardware_specs/efficiency/)."""
    return _load("efficiency", str(device_kind))
