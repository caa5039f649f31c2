"""A job file names one model (what), one cluster (on what) and one TrainConfig (how)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from simtrain.specs.base import Spec
from simtrain.specs.train import TrainConfig

__all__ = ["Job"]


class Job(Spec):
    """``workloads/jobs/*.yaml``: ``model`` and ``cluster`` are library names or paths."""

    name: Annotated[str, Field(min_length=1, max_length=120)]
    description: str = ""
    model: Annotated[str, Field(min_length=1)]
    cluster: Annotated[str, Field(min_length=1)]
    nodes: Annotated[int, Field(ge=1)] | None = None
    config: TrainConfig
    tokens: Annotated[float, Field(gt=0)] | None = None
    """Training tokens for time-to-train (e.g. 300e9)."""
    samples: Annotated[float, Field(gt=0)] | None = None
