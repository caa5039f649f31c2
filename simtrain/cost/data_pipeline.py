"""The input pipeline in closed form (chapter §8.4.2 "Data Pipeline", §8.5.1 "Prefetching and Overlapping").

Per device and per step (``samples`` samples):

* fetch      = samples · sample_bytes / (min(disk, network) · access_factor)
* process    = samples · transform_s / max(num_workers, 1)        (workers preprocess in parallel)
* transfer   = samples · device_bytes / h2d bandwidth             (pageable copies at half rate)
* with prefetching (num_workers > 0 and prefetch_factor > 0) the stages overlap each other and the
  compute, except that a worker reads its batch and then transforms it, and the storage serves one
  read at a time: iteration = max(fetch, fetch / num_workers + process, transfer, compute) (the
  simulator, sim/dataloader.py, runs these semantics event by event and agrees); the loop's own
  per-batch hand-off (``handoff_s_per_batch``) sits beside the compute on that path; without it they add up:
  iteration = fetch + process + transfer + compute.
* stall = iteration − compute; utilization = compute / iteration = pipeline rate / device rate.

The chapter's example: a device that could do 1000 images/s fed at 200 images/s runs at 20 %.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.specs.hardware import Node
from simtrain.specs.train import DataPipeline

__all__ = ["PipelineTimes", "pipeline_times", "PAGEABLE_COPY_FRACTION"]

PAGEABLE_COPY_FRACTION = 0.5
"""Pageable host memory is staged through a pinned bounce buffer: about half the pinned copy rate
(NVIDIA CUDA C++ Best Practices Guide, "Pinned Memory"; confirm with st.measure('cuda'))."""


@dataclass(frozen=True, slots=True)
class PipelineTimes:
    fetch_s: float
    process_s: float
    transfer_s: float
    compute_s: float
    iteration_s: float
    prefetch: bool

    @property
    def stall_s(self) -> float:
        return self.iteration_s - self.compute_s

    @property
    def utilization(self) -> float:
        return 1.0 if self.iteration_s == 0 else self.compute_s / self.iteration_s

    @property
    def limiting_stage(self) -> str:
        stages = {"fetch": self.fetch_s, "process": self.process_s, "transfer": self.transfer_s,
                  "compute": self.compute_s}
        return max(stages, key=stages.get)


def _storage_rate(data: DataPipeline, node: Node | None) -> float | None:
    """min(disk, network) × access factor; None when nothing limits the read."""
    rates = []
    disk = data.storage_bandwidth_bytes_per_s
    if disk is None and node is not None and node.host.nvme is not None:
        nvme = node.host.nvme
        # the node's drives are shared by its devices
        disk = nvme.read_bandwidth_bytes_per_s.value * nvme.drives_count / node.devices_count
    if disk is not None:
        rates.append(disk)
    if data.network_bandwidth_bytes_per_s is not None:
        rates.append(data.network_bandwidth_bytes_per_s)
    return min(rates) * data.access_factor if rates else None


def _h2d_rate(data: DataPipeline, node: Node | None) -> float | None:
    # the host's own PCIe link when the node spec gives one, else the device's host link
    link = None if node is None else (node.host.pcie_link or node.device.host_link)
    if link is None:
        return None
    rate = link.per_direction_bytes_per_s
    return rate if data.pin_memory else rate * PAGEABLE_COPY_FRACTION


def pipeline_times(data: DataPipeline, samples: float, compute_s: float, node: Node | None = None) -> PipelineTimes:
    """Closed-form stage times of feeding ``samples`` samples to one device per ``compute_s`` step."""
    fetch = process = transfer = 0.0
    if data.sample_bytes is not None:
        rate = _storage_rate(data, node)
        fetch = 0.0 if rate is None else samples * data.sample_bytes / rate
    transform = data.transform_seconds_per_sample
    process = samples * transform / max(data.num_workers, 1)
    device_bytes = data.device_bytes_per_sample or data.sample_bytes
    h2d = _h2d_rate(data, node)
    if device_bytes is not None and h2d is not None:
        transfer = samples * device_bytes / h2d
    if data.prefetch:
        # A DataLoader worker reads its batch, then transforms it (one __getitem__ after another): the
        # W workers deliver W batches per (own read + transform) at best, and the storage serves one
        # read at a time, so the loader gives a batch every max(fetch, fetch / W + process).
        workers = max(data.num_workers, 1)
        iteration = max(fetch, fetch / workers + process, transfer, compute_s + data.handoff_s_per_batch)
    else:
        iteration = fetch + process + transfer + compute_s + data.handoff_s_per_batch
    return PipelineTimes(fetch, process, transfer, compute_s, iteration, data.prefetch)
