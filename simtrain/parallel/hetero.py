"""Heterogeneous data parallelism: replica groups on different hardware, one synchronous step.

Synchronous data parallelism waits for the slowest replica at every gradient all-reduce (chapter
§8.6.1, "Workload imbalance ... A100 and V100"): every group runs the same per-replica batch, the
step takes the slowest group's time, and the faster groups idle for the difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.report.step_report import StepReport

__all__ = ["HeteroReport", "estimate_heterogeneous"]


@dataclass(frozen=True)
class HeteroReport:
    groups: tuple[StepReport, ...]
    step_time_s: float
    slowest: int
    idle_fraction: tuple[float, ...]
    """Per group: the share of the step its devices wait for the slowest group."""

    @property
    def utilization(self) -> float:
        """Device-weighted busy share of the step across all groups (1.0 when all groups match)."""
        devices = [g.devices_count for g in self.groups]
        busy = sum(d * (1 - i) for d, i in zip(devices, self.idle_fraction, strict=False))
        return busy / sum(devices)

    @property
    def feasible(self) -> bool:
        return all(g.feasible for g in self.groups)


def estimate_heterogeneous(model, clusters, cfg, estimate_fn=None) -> HeteroReport:
    """One synchronous data-parallel job over ``clusters`` (each a replica group with cfg's tp/pp/cp).

    The global batch is split in proportion to each group's replica count, so every replica runs the
    same per-replica batch; ``cfg.dp`` must be None (each group's dp follows from its size).
    """
    from simtrain.errors import SpecError
    from simtrain.estimator import estimate
    from simtrain.inputs import as_cluster, as_config, as_model
    from simtrain.specs.train import TrainConfig
    estimate_fn = estimate_fn or estimate
    if isinstance(clusters, (str, bytes)) or not hasattr(clusters, "__iter__"):
        raise SpecError.one(None, "clusters", f"must be a list of clusters (or their names), got {type(clusters).__name__}")
    model, cfg = as_model(model), as_config(cfg)
    clusters = [as_cluster(c, arg="clusters") for c in clusters]
    if not clusters:
        raise SpecError.one(None, "clusters", "must name at least one cluster")
    inner = cfg.tp * cfg.pp * cfg.cp
    dps = [c.devices_count // inner for c in clusters]
    per_replica = cfg.global_batch_size // max(1, sum(dps))
    if per_replica < 1 or min(dps) < 1:
        raise SpecError.one(None, "global_batch_size", f"{cfg.global_batch_size} samples cannot give each of the "
                            f"{sum(dps):,} replicas (devices / (tp·pp·cp) per cluster: {dps}) at least one")
    reports = []
    for cluster, dp in zip(clusters, dps, strict=False):
        fields = {**cfg.model_dump(), "dp": dp, "global_batch_size": per_replica * dp}
        reports.append(estimate_fn(model, cluster, TrainConfig(**fields)))
    times = [r.step_time_s for r in reports]
    slowest = max(range(len(times)), key=times.__getitem__)
    step = times[slowest]
    idle = tuple(1.0 - t / step for t in times)
    return HeteroReport(tuple(reports), step, slowest, idle)
