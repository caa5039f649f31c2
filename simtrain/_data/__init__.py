"""Where the hardware library (``hardware_specs/``) and the model/job library (``workloads/``) live.

The repository's top-level ``hardware_specs/`` and ``workloads/`` folders are the only copies in the
source tree. The build (``setup.py`` + ``[tool.setuptools]`` in pyproject.toml) maps them into the
wheel as package data at ``simtrain/_data/hardware_specs`` and ``simtrain/_data/workloads``, so an
installed simtrain finds them through ``importlib.resources``. The order:

1. ``SIMTRAIN_ROOT`` (a folder holding ``hardware_specs/`` and ``workloads/``), when set;
2. the copies shipped in the installed package (a wheel, ``pip install .``);
3. the source checkout that holds this package (a checkout or an editable install), whose
   ``simtrain/_data`` has no library folders of its own.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["LIBRARY_FOLDERS", "data_root", "source_checkout"]

LIBRARY_FOLDERS = ("hardware_specs", "workloads")


def source_checkout() -> Path | None:
    """The repository root when simtrain is imported from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and all((root / f).is_dir() for f in LIBRARY_FOLDERS):
        return root
    return None


def _packaged() -> Path | None:
    """The folder holding the library copies shipped in an installed wheel (a real directory), else None."""
    try:
        here = resources.files("simtrain") / "_data"
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - simtrain imported oddly
        return None
    if isinstance(here, Path) and all((here / f).is_dir() for f in LIBRARY_FOLDERS):
        return here  # a zipped install (not a Path) is not supported: the loaders stat and list files
    return None


def data_root() -> Path:
    """The folder whose ``hardware_specs/`` and ``workloads/`` are the libraries (see the module doc)."""
    env = os.environ.get("SIMTRAIN_ROOT")
    if env:
        return Path(env)
    return _packaged() or source_checkout() or Path(__file__).resolve().parents[2]
