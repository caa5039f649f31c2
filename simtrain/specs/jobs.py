"""Loading job files (workloads/jobs/*.yaml) and resolving the model and cluster they name.

A job's ``model:`` and ``cluster:`` are references written inside a spec file: a library name, or a
path relative to the job file that stays in its folder (or the library). Absolute paths and ``..``
are refused there (:func:`simtrain.specs.library.resolve_reference`); they are fine on the command
line (``--model``, ``--hardware``), which is the user speaking directly.
"""

from __future__ import annotations

import os

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.library import _load, library_path, resolve_reference

__all__ = ["load_job", "job_path", "job_reference"]


def load_job(name_or_path):
    """A :class:`~simtrain.specs.job.Job` by name (``default``) or path."""
    return _load("job", name_or_path)


def job_path(name_or_path) -> str:
    """The file of a job given by name or path (what its references are relative to)."""
    return str(library_path("job", name_or_path))


def job_reference(job_file: str | os.PathLike, field: str, value: str) -> str:
    """The job's ``field`` (``model`` or ``cluster``) as a library name or a checked real path;
    a :class:`SpecError` naming the job file and the field otherwise."""
    try:
        return resolve_reference(field, value, job_file, field)
    except SpecError as err:
        raise SpecError([SpecIssue(os.fspath(job_file), field, i.reason) for i in err.issues]) from None
