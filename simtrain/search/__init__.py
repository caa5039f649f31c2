"""Sweeps and planning over the analytical estimate (local, or on a Dask cluster)."""

from simtrain.search.plan import plan
from simtrain.search.sweep import sweep

__all__ = ["sweep", "plan"]
