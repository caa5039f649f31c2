"""Loading job files (workloads/jobs/*.yaml)."""

from __future__ import annotations

from simtrain.specs.library import _load

__all__ = ["load_job"]


def load_job(name_or_path):
    """A :class:`~simtrain.specs.job.Job` by name (``default``) or path."""
    return _load("job", name_or_path)
