"""The input pipeline for real: a torch DataLoader over a synthetic dataset whose per-sample transform
costs a known number of CPU seconds, feeding a fixed-time "compute" step, versus the closed form
:func:`simtrain.cost.data_pipeline.pipeline_times`.

* transform: a busy loop on ``time.perf_counter`` for ``transform_s`` seconds per sample (real CPU
  work, so workers compete for cores as a decoder does — not a sleep);
* compute: ``time.sleep(compute_s)`` per batch: the accelerator's step, during which the host CPU is
  free (on this CPU-only machine a sleep is the one way to have a step that leaves the cores to the
  workers, as a GPU step does);
* measured per batch, after the workers are up (``persistent_workers``) and a warm-up: the iteration
  time (wall time / batches → throughput = batch / iteration) and the stall (time spent in
  ``next(loader)``).

Also measured (reported, not fed to the prediction): the loader's own per-batch hand-off cost — the
iteration time of the same loader with a zero-cost transform and no compute step, for 1 and 2
workers — which the closed form has no term for (worker → main-process queue, tensor sharing).

The prediction is given only the nominal seconds: ``DataPipeline(transform_s_per_sample=transform_s,
num_workers=w, prefetch_factor=2)`` with ``compute_s`` — nothing is fitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

from simtrain.cost.data_pipeline import pipeline_times
from simtrain.specs.train import DataPipeline
from validation.report import Case

__all__ = ["BusyDataset", "PipelineCase", "measure_loader", "predict_loader", "pipeline_cases", "handoff_s",
           "CASES"]


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class BusyDataset(Dataset):
    """``length`` samples of ``shape`` floats; each ``__getitem__`` burns ``transform_s`` CPU seconds."""

    def __init__(self, length: int, transform_s: float, shape: tuple[int, ...] = (3, 32, 32)) -> None:
        self.length, self.transform_s, self.shape = length, transform_s, shape

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        busy_wait(self.transform_s)
        return torch.full(self.shape, float(i % 7)), i % 10


@dataclass(frozen=True)
class PipelineCase:
    batch: int
    transform_s: float
    compute_s: float
    workers: int

    @property
    def name(self) -> str:
        return (f"loader w{self.workers} b{self.batch} transform {self.transform_s * 1e3:g} ms/sample "
                f"compute {self.compute_s * 1e3:g} ms")


#: data-bound, balanced and compute-bound settings × 0 / 1 / 2 workers.
CASES = tuple(PipelineCase(8, t, c, w) for t, c in ((2e-3, 10e-3), (1e-3, 20e-3)) for w in (0, 1, 2))


@dataclass(frozen=True)
class LoaderTimes:
    iteration_s: float
    stall_s: float


def measure_loader(case: PipelineCase, batches: int, warmup: int = 3) -> LoaderTimes:
    """Mean iteration and stall per batch over ``batches`` batches after ``warmup`` batches."""
    total = (warmup + batches) * case.batch
    ds = BusyDataset(total, case.transform_s)
    loader = DataLoader(ds, batch_size=case.batch, num_workers=case.workers, shuffle=False,
                        prefetch_factor=2 if case.workers else None, persistent_workers=case.workers > 0)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
        time.sleep(case.compute_s)
    stall = 0.0
    start = time.perf_counter()
    for _ in range(batches):
        t0 = time.perf_counter()
        next(it)
        stall += time.perf_counter() - t0
        time.sleep(case.compute_s)
    wall = time.perf_counter() - start
    del it, loader
    return LoaderTimes(wall / batches, stall / batches)


def handoff_s(workers: int, batches: int = 30, batch: int = 8) -> float:
    """Per-batch iteration time of a loader whose transform and compute cost nothing."""
    return measure_loader(PipelineCase(batch, 0.0, 0.0, workers), batches).iteration_s


def predict_loader(case: PipelineCase):
    data = DataPipeline(transform_s_per_sample=case.transform_s, num_workers=case.workers, prefetch_factor=2,
                        pin_memory=False)
    return pipeline_times(data, case.batch, case.compute_s, None)


def pipeline_cases(batches: int, cases=CASES) -> list[Case]:
    """Throughput and stall of every case, predicted vs measured."""
    out = []
    for pc in cases:
        got = measure_loader(pc, batches)
        pred = predict_loader(pc)
        detail = {"measured_iteration_s": got.iteration_s, "predicted_iteration_s": pred.iteration_s,
                  "limiting_stage": pred.limiting_stage, "batches": batches}
        out.append(Case(pc.name, "pipeline_throughput", pc.batch / pred.iteration_s, pc.batch / got.iteration_s,
                        detail=detail))
        out.append(Case(pc.name, "pipeline_stall", pred.stall_s, got.stall_s, basis=got.iteration_s, detail=detail))
    return out
