"""The input pipeline as simpy processes (PyTorch ``torch.utils.data.DataLoader`` semantics).

Per device, with ``samples`` samples per step (one batch) and a training step of ``compute_s``:

* ``num_workers`` worker processes; worker k builds batches k, k + W, k + 2W, … (the DataLoader's
  round-robin index assignment): read the batch from storage — samples · sample_bytes / rate
  seconds; the storage serves one read at a time, in request order — then decode / augment it on
  its own CPU core for samples · transform_s seconds;
* the batches wait in the order they are due in a bounded queue: a worker may run at most
  num_workers · prefetch_factor batches ahead of the step that consumes them (the DataLoader's
  outstanding-index limit);
* host memory (a simpy Container) holds each batch from its read's start to its copy's end;
* the pin-memory copy: one batch at a time over the host-to-device link (samples · device_bytes /
  h2d rate, pageable at half rate: cost/data_pipeline.py), into a device buffer one batch deep, so
  the copy of the next batch overlaps the current step;
* the training loop takes batch i, computes ``compute_s``, takes batch i + 1, …

Without prefetching (``num_workers`` 0, or ``prefetch_factor`` 0) the loop does it all itself,
one after the other: read, transform (split over the workers when there are any), copy, compute.

The stall per step is read from the run in steady state — the mean step-to-step time over the
last ``W`` steps (one full round of the workers) after the queue has filled or drained — minus the
compute. It equals the closed form (cost/data_pipeline.py: max(fetch, fetch / W + process, transfer,
compute) with prefetching — a worker reading is not transforming — and the plain sum without).
(Sharing the storage fairly between concurrent reads instead would keep symmetric workers in
lockstep, all reading and then all transforming, and leave the storage idle: an artifact of exact
symmetry that a real loader's jitter breaks, so reads queue here.)
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from simtrain.cost.data_pipeline import PipelineTimes, pipeline_times
from simtrain.sim.links import SharedLink

__all__ = ["DataLoaderRun", "simulate_data_loader"]


@dataclass(frozen=True)
class DataLoaderRun:
    times: PipelineTimes
    """Closed-form stage times (fetch / process / transfer per step) with the simulated iteration."""
    closed_form: PipelineTimes
    starts_s: tuple[float, ...]
    """When each simulated step started computing (its batch was on the device and the step before done)."""
    log: tuple[tuple[str, float, float], ...]
    """(name, start, end) of every read, transform, copy and compute."""
    host_peak_bytes: float = 0.0
    """Most host memory the batches in flight held at once (from a read's start to its copy's end)."""


class _Loader:
    def __init__(self, data, times: PipelineTimes, steps: int, batch_bytes: float) -> None:
        self.env, self.t, self.steps = simpy.Environment(), times, steps
        self.host, self.batch_bytes, self.host_peak = simpy.Container(self.env, capacity=float("inf")), batch_bytes, 0.0
        self.workers = max(1, data.num_workers)
        self.prefetch = data.prefetch
        self.handoff_s = data.handoff_s_per_batch
        self.storage = simpy.Resource(self.env, capacity=1)  # serves one read at a time, in request order
        self.h2d = SharedLink(self.env, "h2d")
        self.ahead = simpy.Container(self.env, init=data.num_workers * max(1, data.prefetch_factor))
        self.ready: list[simpy.Event] = [self.env.event() for _ in range(steps)]
        self.on_device = simpy.Store(self.env, capacity=1)
        self.starts: list[float] = []
        self.log: list[tuple[str, float, float]] = []

    def _hold(self) -> None:
        if self.batch_bytes > 0:
            self.host.put(self.batch_bytes)
            self.host_peak = max(self.host_peak, self.host.level)

    def _release(self) -> None:
        if self.batch_bytes > 0:
            self.host.get(self.batch_bytes)

    def _note(self, name: str, start: float) -> None:
        self.log.append((name, start, self.env.now))

    def worker(self, k: int):
        for i in range(k, self.steps, self.workers):
            yield self.ahead.get(1)  # stay within num_workers · prefetch_factor batches of the loop
            self._hold()
            start = self.env.now
            with self.storage.request() as turn:
                yield turn
                start = self.env.now
                yield self.env.timeout(self.t.fetch_s)
            self._note(f"read b{i}", start)
            start = self.env.now
            yield self.env.timeout(self.t.process_s * self.workers)  # one worker transforms a whole batch
            self._note(f"transform b{i}", start)
            self.ready[i].succeed()

    def copier(self):
        for i in range(self.steps):
            yield self.ready[i]
            start = self.env.now
            yield self.h2d.transfer(self.t.transfer_s, f"copy b{i}")
            self._note(f"copy b{i}", start)
            self._release()
            yield self.on_device.put(i)

    def loop(self):
        for _ in range(self.steps):
            i = yield self.on_device.get()
            self.ahead.put(1)
            if self.handoff_s:  # the loop takes the batch (result queue, unpickling) before it computes
                start = self.env.now
                yield self.env.timeout(self.handoff_s)
                self._note(f"handoff b{i}", start)
            self.starts.append(self.env.now)
            yield self.env.timeout(self.t.compute_s)
            self._note(f"compute b{i}", self.starts[-1])

    def serial(self):
        """No prefetching: the loop reads, transforms, copies and computes each batch in turn."""
        for i in range(self.steps):
            self._hold()
            for name, seconds in (("read", self.t.fetch_s), ("transform", self.t.process_s),
                                  ("copy", self.t.transfer_s), ("handoff", self.handoff_s)):
                start = self.env.now
                yield self.env.timeout(seconds)
                self._note(f"{name} b{i}", start)
            self._release()
            self.starts.append(self.env.now)
            yield self.env.timeout(self.t.compute_s)
            self._note(f"compute b{i}", self.starts[-1])

    def run(self) -> float:
        if self.prefetch:
            for k in range(self.workers):
                self.env.process(self.worker(k))
            self.env.process(self.copier())
            self.env.process(self.loop())
        else:
            self.env.process(self.serial())
        self.env.run()
        return self.env.now


def _steps_for(data) -> int:
    """Enough steps to fill (or drain) the queue and then watch the workers go round twice."""
    w = max(1, data.num_workers)
    return 2 * w * (max(1, data.prefetch_factor) + 3) + 4


def simulate_data_loader(data, samples: float, compute_s: float, node=None, steps: int | None = None) -> DataLoaderRun:
    """Simulate ``steps`` steps of the input pipeline ``data`` (a DataPipeline) feeding a device that
    computes ``compute_s`` per step of ``samples`` samples; the iteration is the steady-state mean."""
    closed = pipeline_times(data, samples, compute_s, node)
    per_sample = max(data.sample_bytes or 0.0, data.device_bytes_per_sample or 0.0)
    loader = _Loader(data, closed, steps or _steps_for(data), samples * per_sample)
    end = loader.run()
    w = loader.workers if data.prefetch else 1
    starts = loader.starts  # a step lasts from its start to the next one's
    iteration = (starts[-1] - starts[-1 - w]) / w if len(starts) > w else end / len(starts)
    iteration = max(iteration, compute_s)  # rounding: a step never takes less than its compute
    times = PipelineTimes(closed.fetch_s, closed.process_s, closed.transfer_s, compute_s, iteration, closed.prefetch)
    return DataLoaderRun(times, closed, tuple(loader.starts), tuple(loader.log), loader.host_peak)
