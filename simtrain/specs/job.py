"""A job file names one model (what), one cluster (on what) and one TrainConfig (how)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from simtrain.errors import SpecError
from simtrain.specs.base import Spec, register_schema
from simtrain.specs.references import referring_file, resolve_reference
from simtrain.specs.train import TrainConfig

__all__ = ["Job"]


def _reference(field: str):
    """After-validator: the value is a library name or a path that may be used from inside a spec file
    (relative, no ``..``, not out of the job file's folder through a symlink); it is not rewritten."""
    def check(value: str) -> str:
        try:
            resolve_reference(field, value, referring_file(), field)
        except SpecError as err:
            raise ValueError("; ".join(i.reason for i in err.issues)) from None
        return value
    return check


@register_schema("job")
class Job(Spec):
    """``workloads/jobs/*.yaml``: ``model`` and ``cluster`` are library names or paths relative to the
    job file (see :mod:`simtrain.specs.jobs`)."""

    name: Annotated[str, Field(min_length=1, max_length=120)]
    description: str = ""
    model: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_reference("model"))]
    cluster: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_reference("cluster"))]
    nodes: Annotated[int, Field(ge=1)] | None = None
    config: TrainConfig
    tokens: Annotated[float, Field(gt=0)] | None = None
    """Training tokens for time-to-train (e.g. 300e9)."""
    samples: Annotated[float, Field(gt=0)] | None = None
