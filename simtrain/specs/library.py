"""Loading spec files: YAML → validated, frozen spec objects, with errors that name file and field.

Every spec file starts with ``spec: device | link | node | cluster | model | job`` so that any file can
be checked on its own (``simtrain check FILE``). Names resolve against the library folders
(``hardware_specs/{devices,links,nodes,clusters}``, ``workloads/{models,jobs}``); a value ending in
``.yaml``/``.yml`` or containing a path separator is read as a path instead.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.base import spec_error_from_validation

__all__ = [
    "REPO_ROOT", "HARDWARE_DIR", "WORKLOADS_DIR", "read_yaml", "read_spec_document", "library_names",
    "library_path", "load_device", "load_link", "load_node", "load_cluster", "load_efficiency_default",
    "validate_document", "SPEC_KINDS",
]

REPO_ROOT = Path(os.environ.get("SIMTRAIN_ROOT", Path(__file__).resolve().parents[2]))
HARDWARE_DIR = REPO_ROOT / "hardware_specs"
WORKLOADS_DIR = REPO_ROOT / "workloads"

_FOLDERS = {
    "device": HARDWARE_DIR / "devices",
    "link": HARDWARE_DIR / "links",
    "node": HARDWARE_DIR / "nodes",
    "cluster": HARDWARE_DIR / "clusters",
    "efficiency": HARDWARE_DIR / "efficiency",
    "model": WORKLOADS_DIR / "models",
    "job": WORKLOADS_DIR / "jobs",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
SPEC_KINDS = ("device", "link", "node", "cluster", "efficiency", "model", "job")


def read_yaml(path: Path) -> Any:
    """Read one YAML document; missing, unreadable, empty or broken files are a SpecError."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError.one(name, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError.one(name, "", f"cannot read file: {err}") from None
    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise SpecError.one(name, "", "YAML nested too deeply") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError.one(name, "", f"broken YAML{where}: {problem}") from None
    if doc is None:
        raise SpecError.one(name, "", "empty file")
    return doc


def read_spec_document(path: Path, expected: str | None = None) -> tuple[str, dict]:
    """Return (spec kind, body) of a spec file, checking the ``spec:`` header."""
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise SpecError.one(str(path), "", f"expected a mapping at the top level, got {type(doc).__name__}")
    kind = doc.get("spec")
    if kind not in SPEC_KINDS:
        raise SpecError.one(str(path), "spec", f"must be one of {', '.join(SPEC_KINDS)}; got {kind!r}")
    if expected is not None and kind != expected:
        raise SpecError.one(str(path), "spec", f"expected a {expected} spec, got {kind!r}")
    body = {k: v for k, v in doc.items() if k != "spec"}
    return kind, body


def library_path(kind: str, name_or_path: str | os.PathLike) -> Path:
    """Path of a library item by name, or the path itself when one is given."""
    text = os.fspath(name_or_path)
    if "\x00" in text:
        raise SpecError.one(None, kind, f"{text!r} is not a valid name or path (NUL byte)")
    if text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text:
        return Path(text)
    if not _NAME.fullmatch(text):
        raise SpecError.one(None, kind, f"{text!r} is not a library name (letters, digits, '.', '_', '-') "
                            f"nor a .yaml path")
    folder = _FOLDERS[kind]
    for ext in (".yaml", ".yml"):
        candidate = folder / f"{text}{ext}"
        if candidate.exists():
            return candidate
    known = ", ".join(library_names(kind)) or "none"
    raise SpecError.one(None, kind, f"no {kind} named {text!r} in {folder} (known: {known})")


def library_names(kind: str) -> list[str]:
    folder = _FOLDERS[kind]
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))


def _schema(kind: str) -> type[BaseModel]:
    from simtrain.specs import hardware
    if kind == "job":
        from simtrain.specs.job import Job
        return Job
    if kind == "model":
        from simtrain.graph.spec import ModelSpec
        return ModelSpec
    return {"device": hardware.Device, "link": hardware.Link, "node": hardware.Node,
            "cluster": hardware.Cluster, "efficiency": hardware.Efficiency}[kind]


def validate_document(kind: str, body: dict, file: str | None) -> BaseModel:
    """Validate a parsed document as ``kind``; errors name ``file`` and the field path."""
    try:
        return _schema(kind).model_validate(body)
    except ValidationError as err:
        raise spec_error_from_validation(err, file) from None
    except SpecError as err:  # a referenced file is broken: keep its own file and field
        raise SpecError([SpecIssue(i.file or file, i.field, i.reason) for i in err.issues]) from None


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
        raise SpecError.one(str(path), "", f"cannot read file: {err}") from None
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
        except ValidationError as err:
            raise spec_error_from_validation(err, str(library_path("cluster", name))) from None
    return cluster


def load_efficiency_default(device_kind: str):
    """The documented default efficiency profile of a device kind (hardware_specs/efficiency/)."""
    return _load("efficiency", str(device_kind))
