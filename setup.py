"""Build shim: metadata and package data live in pyproject.toml; this file only lists the packages.

The wheel holds ``simtrain`` and its subpackages (not the checkout's ``validation/``) plus the
repository's ``hardware_specs/`` and ``workloads/``, mapped by ``package_dir`` to
``simtrain/_data/hardware_specs`` and ``simtrain/_data/workloads`` (the top-level folders stay the only
copies; see simtrain/_data/__init__.py). pyproject's declarative ``packages.find`` cannot add packages
that live outside the ``simtrain/`` tree, hence this list. Data folders are listed as (namespace)
packages so that setuptools does not warn that they are absent from ``packages``.
"""

from setuptools import find_namespace_packages, setup

DATA_DIRS = {"simtrain._data.hardware_specs": "hardware_specs", "simtrain._data.workloads": "workloads"}

CODE = find_namespace_packages(include=["simtrain", "simtrain.*"], exclude=["*__pycache__*"])
DATA = [f"{pkg}.{sub}" for pkg, folder in DATA_DIRS.items() for sub in find_namespace_packages(where=folder)]

setup(packages=sorted(CODE + list(DATA_DIRS) + DATA), package_dir=DATA_DIRS)
