"""Where spec names and paths point: the library folders, and the rule for references written inside
a spec file (relative to that file, inside its folder or the library; see :func:`resolve_reference`).

Pure path logic, no schemas: the schema modules (hardware, job) use it while they validate, and
:mod:`simtrain.specs.library` (which loads and validates files) builds on it.
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from pathlib import Path

from simtrain._data import data_root
from simtrain.errors import SpecError
from simtrain.specs.reading import clip

__all__ = ["REPO_ROOT", "HARDWARE_DIR", "WORKLOADS_DIR", "FOLDERS", "REFERRER", "library_path", "library_names", "did_you_mean",
           "resolve_reference", "referring_file", "looks_like_path"]

# The folder holding hardware_specs/ and workloads/: $SIMTRAIN_ROOT, else the copies shipped in the
# installed wheel (importlib.resources), else the source checkout; see simtrain/_data/__init__.py.
REPO_ROOT = data_root()
HARDWARE_DIR = REPO_ROOT / "hardware_specs"
WORKLOADS_DIR = REPO_ROOT / "workloads"

FOLDERS = {
    "device": HARDWARE_DIR / "devices",
    "link": HARDWARE_DIR / "links",
    "node": HARDWARE_DIR / "nodes",
    "cluster": HARDWARE_DIR / "clusters",
    "efficiency": HARDWARE_DIR / "efficiency",
    "model": WORKLOADS_DIR / "models",
    "job": WORKLOADS_DIR / "jobs",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
REFERRER: ContextVar[str | None] = ContextVar("simtrain_spec_referrer", default=None)
"""The spec file being validated right now (set by :func:`simtrain.specs.library.validate_document`)."""


def _text(field: str, name_or_path: str | os.PathLike) -> str:
    try:
        text = os.fspath(name_or_path)
    except TypeError:
        raise SpecError.one(None, field, f"expected a name or a path, got {type(name_or_path).__name__}") from None
    if not isinstance(text, str):
        raise SpecError.one(None, field, "expected a name or a path as text, got bytes")
    if "\x00" in text:
        raise SpecError.one(None, field, f"{clip(text)} is not a valid name or path (NUL byte)")
    return text


def looks_like_path(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text


def library_path(kind: str, name_or_path: str | os.PathLike) -> Path:
    """Path of a library item by name, or the path itself when one is given.

    This is the entry point for names and paths the user gives directly (command line, ``load_*``):
    any path is accepted here. References inside spec files go through :func:`resolve_reference`."""
    text = _text(kind, name_or_path)
    if looks_like_path(text):
        return Path(text)
    if not _NAME.fullmatch(text):
        raise SpecError.one(None, kind, f"{clip(text)} is not a library name (letters, digits, '.', '_', '-') "
                            f"nor a .yaml path")
    folder = FOLDERS[kind]
    for ext in (".yaml", ".yml"):
        candidate = folder / f"{text}{ext}"
        if candidate.exists():
            return candidate
    names = library_names(kind)
    hint = did_you_mean(text, names)
    raise SpecError.one(None, kind, f"no {kind} named {clip(text)} in {folder} ({hint + '; ' if hint else ''}"
                                    f"known: {', '.join(names) or 'none'})")


def did_you_mean(text: str, names) -> str:
    """"did you mean 'x'?" for the nearest known name (difflib), or "" when none is near."""
    import difflib
    near = difflib.get_close_matches(str(text), list(names), n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}?" if near else ""


def library_names(kind: str) -> list[str]:
    folder = FOLDERS[kind]
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))



def _library_roots() -> list[str]:
    roots = []
    for folder in (HARDWARE_DIR, WORKLOADS_DIR):
        try:
            roots.append(os.path.realpath(os.fspath(folder)))
        except TypeError:  # pragma: no cover - a library that is not on the file system
            continue
    return roots


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def resolve_reference(kind: str, value: str | os.PathLike, referrer: str | os.PathLike | None,
                      field: str | None = None) -> str:
    """A reference written inside a spec file (``device:`` of a node, ``node:`` of a cluster, a link,
    ``model:`` / ``cluster:`` of a job) → a library name, or the real path of the file it names.

    A name (no ``/``, no ``.yaml``) is returned as it is, for the library to look up. A path must be
    relative to the referring file, must not be absolute nor contain ``..``, and once symlinks are
    resolved must stay inside the referring file's folder or the library; anything else is a
    :class:`SpecError` on ``field`` (the file is added by the caller). With no referring file (a
    mapping validated from Python, e.g. ``Node.model_validate({"device": path, ...})``) the caller is
    using the API directly and the path is returned as it is, like a ``load_*`` argument."""
    field = field or kind
    text = _text(field, value)
    if not looks_like_path(text) or referrer is None:
        return text
    if os.path.isabs(text) or text.startswith("~"):
        raise SpecError.one(None, field, f"absolute path {clip(text)} refused in a spec file: use a library "
                            "name or a path relative to this file")
    if ".." in re.split(r"[\\/]", text):
        raise SpecError.one(None, field, f"path {clip(text)} refused in a spec file: '..' may not leave "
                            "the folder of this file")
    base = os.path.dirname(os.path.abspath(os.fspath(referrer)))
    real = os.path.realpath(os.path.join(base, text))
    if not any(_inside(real, root) for root in [os.path.realpath(base), *_library_roots()]):
        raise SpecError.one(None, field, f"path {clip(text)} refused: it resolves (through a symlink) outside "
                            "the folder of this file and the library")
    return real


def referring_file() -> str | None:
    """The spec file being validated right now (what references inside it are relative to), or None."""
    return REFERRER.get()
