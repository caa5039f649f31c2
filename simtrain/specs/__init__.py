"""Schemas and loading of every input: hardware, models, training configs, jobs."""

from simtrain.specs.hardware import (
    Cluster,
    ComputeCurve,
    Device,
    Efficiency,
    Fabric,
    Host,
    Link,
    MatrixUnit,
    MemoryTier,
    Network,
    Node,
    Storage,
)
from simtrain.specs.train import DataPipeline, EvalConfig, TrainConfig, layout_problems, resolve_dp

__all__ = [
    "Cluster", "ComputeCurve", "Device", "Efficiency", "Fabric", "Host", "Link", "MatrixUnit",
    "MemoryTier", "Network", "Node", "Storage", "DataPipeline", "EvalConfig", "TrainConfig",
    "layout_problems", "resolve_dp",
]
