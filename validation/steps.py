"""Real training steps of the zoo on one device versus simtrain's prediction from the calibration.

One step is what a training loop does: ``zero_grad(set_to_none=True)``, forward, loss, backward,
``optimizer.step()``. The optimizer is the one the prediction assumes (:data:`TORCH_OPTIMIZERS`:
PyTorch's ``fused=True`` kernels, "fused" in the estimator's sense, on CPU as on CUDA). Timing:
warm-ups, then ``repeats`` samples of one step each, median (and p10/p90), with the thread count
the calibration measurements used, through the helper users time their own loops with
(``st.time_steps``: synchronised on GPUs; on CPU it also counts the fresh pages each step faults
in). The model simtrain predicts is captured from a deep copy of the module, so the timed module
has never run under the capture's dispatch modes.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

import simtrain as st
from simtrain.calibrate.step_timer import StepTimes
from validation.counters import (
    allocated_bytes,
    counter_flops,
    hook_saved_bytes,
    peak_allocated_bytes,
    simtrain_counter_flops,
    simtrain_saved_bytes,
)
from validation.report import Case
from validation.workloads import Workload

__all__ = ["TORCH_OPTIMIZERS", "make_optimizer", "train_step", "time_steps", "predict_step", "StepResult",
           "validate_workload"]

#: simtrain optimizer name → (factory(params, device), hyper-parameters that matter for the step's work).
TORCH_OPTIMIZERS: dict[str, Callable] = {
    "sgd": lambda p, dev: torch.optim.SGD(p, lr=1e-3, **_multi(dev)),
    "momentum": lambda p, dev: torch.optim.SGD(p, lr=1e-3, momentum=0.9, **_multi(dev)),
    "adam": lambda p, dev: torch.optim.Adam(p, lr=1e-4, **_multi(dev)),
    "adamw": lambda p, dev: torch.optim.AdamW(p, lr=1e-4, **_multi(dev)),
}


def _multi(device: str) -> dict:
    """The fused kernels (CPU and CUDA since torch 2.4): the estimator's "fused" step. The foreach path
    is not used: on CPU it falls back to per-tensor kernels (the estimator's "unfused"; see
    simtrain.calibrate.bench_vector)."""
    return {"fused": True}


def make_optimizer(kind: str, params, device: str) -> torch.optim.Optimizer:
    try:
        return TORCH_OPTIMIZERS[kind](params, device)
    except KeyError:
        raise ValueError(f"no torch optimizer for {kind!r}; known: {', '.join(TORCH_OPTIMIZERS)}") from None


def train_step(module, inputs, loss_fn, opt) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(module(*inputs)).backward()
        opt.step()
    return step


def time_steps(step: Callable[[], None], device: str, warmup: int, repeats: int) -> StepTimes:
    """Median of ``repeats`` single-step samples after ``warmup`` steps (``st.time_steps``)."""
    return st.time_steps(step, device=device, warmup=warmup, steps=repeats)


def train_config(batch: int, optimizer: str, **extra) -> st.TrainConfig:
    """The loop of :func:`train_step` as a TrainConfig: fused optimizer, no gradient clipping,
    ``zero_grad(set_to_none=True)``."""
    return st.TrainConfig(global_batch_size=batch, micro_batch_size=extra.pop("micro_batch_size", batch),
                          precision="fp32", optimizer=optimizer, fused_optimizer=True, grad_clipping=False,
                          zero_grad_to_none=True, **extra)


def predict_step(model, device_spec, batch: int, optimizer: str) -> st.StepReport:
    return st.estimate(model, st.Cluster.single(device_spec), train_config(batch, optimizer))


@dataclass(frozen=True)
class StepResult:
    cases: tuple[Case, ...]
    report: st.StepReport
    model: st.Model
    timing: StepTimes
    capture_s: float


def _flop_case(w: Workload, module, inputs, loss_fn, model, report) -> Case:
    count = counter_flops(module, inputs, loss_fn)
    return Case(w.case, "flops", simtrain_counter_flops(model, w.batch), float(count.corrected),
                detail={"counter_raw": count.raw, "grouped_conv_excess": count.grouped_conv_excess,
                        "simtrain_model_flops_per_step": report.model_flops_per_step})


def _saved_case(w: Workload, module, inputs, loss_fn, model, report) -> Case:
    ops_saved = simtrain_saved_bytes(model, w.batch)
    est = report.memory.activations_bytes if report.memory is not None else float("nan")
    return Case(w.case, "saved_bytes", est, float(hook_saved_bytes(module, inputs, loss_fn)),
                detail={"op_records_saved_bytes": ops_saved})


def charged_first_touch_s(model, device_spec, w: Workload, report) -> float:
    """Seconds of first-touch page faults the prediction charges (``report`` less the same prediction
    with ``first_touch_bytes_per_s`` off); 0 where the device has no first-touch rate."""
    eff = device_spec.efficiency
    if eff is None or eff.first_touch_bytes_per_s <= 0:
        return 0.0
    off = device_spec.model_copy(update={"efficiency": eff.model_copy(update={"first_touch_bytes_per_s": 0.0})})
    return max(report.step_time_s - predict_step(model, off, w.batch, w.optimizer).step_time_s, 0.0)


def _step_case(w: Workload, report, plain, timing: StepTimes, threads: int, first_touch: tuple[float, float]) -> Case:
    top = [(o.name, o.seconds) for o in report.top_ops[:5]]
    charged_s, rate = first_touch
    fresh = timing.fresh_bytes
    return Case(w.case, "step_time_unseen" if w.unseen else "step_time", report.step_time_s, timing.median_s,
                detail={"p10_s": timing.p10_s, "p90_s": timing.p90_s, "repeats": timing.steps,
                        "threads": threads, "optimizer": w.optimizer,
                        "predicted_plain_calibration_s": plain.step_time_s if plain is not None else None,
                        "breakdown_s": dict(report.time_breakdown_s), "top_ops_s": top,
                        "fresh_bytes_per_step": timing.fresh_bytes_per_step,
                        "fresh_bytes_mean": sum(fresh) / len(fresh) if fresh else None,
                        "first_touch_charged_s": charged_s, "first_touch_bytes_per_s": rate,
                        "steal_fraction": timing.steal_fraction, "other_cpu_fraction": timing.other_cpu_fraction})


def fresh_pages_markdown(cases: list[Case]) -> list[str]:
    """Fresh pages each measured step faulted in (round 1) against what the prediction charges for
    them, and what the rest would cost at the calibrated first-touch rate."""
    rows = [c for c in cases if c.metric in ("step_time", "step_time_unseen")
            and c.detail.get("fresh_bytes_mean") is not None and c.detail.get("first_touch_bytes_per_s")]
    if not rows:
        return []
    lines = ["Fresh memory pages per step, counted with `getrusage` minor faults during the timed steps "
             "(`st.time_steps`, round 1), against the first-touch bytes the prediction charges (tensors "
             "glibc maps fresh every time, ≥ `first_touch_min_bytes`). The rest comes from glibc returning "
             "the top of its heap to the kernel, which depends on the order of every allocation and is not "
             "modelled (docs/own-device.md, \"Allocator faults\"). 'By round': the mean per step of each "
             "round's timing, beside that round's step time.", "",
             "| case | measured MiB / step (median / mean) | charged MiB / step | rest at the first-touch rate | "
             "step error | by round: MiB / step @ ms |", "|---|---:|---:|---:|---:|---|"]
    for c in rows:
        d = c.detail
        rate = d["first_touch_bytes_per_s"]
        charged = d["first_touch_charged_s"] * rate
        rest_s = max(d["fresh_bytes_mean"] - charged, 0.0) / rate
        lines.append(f"| {c.case} | {d['fresh_bytes_per_step'] / 2**20:.1f} / {d['fresh_bytes_mean'] / 2**20:.1f} "
                     f"| {charged / 2**20:.1f} | {rest_s * 1e3:.2f} ms ({100 * rest_s / c.measured:.1f} % of the step) "
                     f"| {100 * (c.predicted / c.measured - 1):+.1f} % | {_by_round(d)} |")
    return lines


def _by_round(detail: dict) -> str:
    """Each round's mean fresh MiB per step @ its step time in ms (rounds without the counter: '?')."""
    pairs = zip(detail.get("rounds_fresh_bytes") or (), detail.get("rounds_s") or (), strict=False)
    return ", ".join(f"{'?' if b is None else f'{b / 2**20:.0f}'} @ {t * 1e3:.1f}" for b, t in pairs)


def _memory_case(w: Workload, step, device: str, report, baseline_bytes: int) -> Case | None:
    peak = peak_allocated_bytes(step, device, baseline_bytes)
    if peak is None or report.memory is None:
        return None
    m = report.memory
    # the estimator's allowance for fragmentation and workspace is not allocated memory: left out
    return Case(w.case, "peak_memory", m.total_bytes - m.overhead_bytes, float(peak),
                detail={"overhead_allowance_bytes": m.overhead_bytes, "memory": m.to_dict()})


def validate_workload(w: Workload, device_spec, device: str, warmup: int, repeats: int,
                      threads: int, seed: int = 0, plain_spec=None) -> StepResult:
    """Every single-device case of ``w``: step time, FLOPs, saved bytes, and peak memory on CUDA.
    ``device_spec`` predicts; ``plain_spec`` (``st.calibrate``'s device alone) is reported beside it."""
    baseline = allocated_bytes(device)
    module, inputs, loss_fn = w.build(device, seed)
    t0 = time.perf_counter()
    model = st.Model.from_torch(copy.deepcopy(module), inputs, loss_fn, name=w.name)
    capture_s = time.perf_counter() - t0
    report = predict_step(model, device_spec, w.batch, w.optimizer)
    plain = predict_step(model, plain_spec, w.batch, w.optimizer) if plain_spec is not None else None
    cases = [_flop_case(w, module, inputs, loss_fn, model, report),
             _saved_case(w, module, inputs, loss_fn, model, report)]
    step = train_step(module, inputs, loss_fn, make_optimizer(w.optimizer, module.parameters(), device))
    timing = time_steps(step, device, warmup, repeats)
    first_touch = (charged_first_touch_s(model, device_spec, w, report),
                   device_spec.efficiency.first_touch_bytes_per_s if device_spec.efficiency else 0.0)
    cases.insert(0, _step_case(w, report, plain, timing, threads, first_touch))
    if plain is not None:
        metric = "step_time_plain_unseen" if w.unseen else "step_time_plain"
        cases.insert(1, Case(w.case, metric, plain.step_time_s, timing.median_s,
                             detail={"device": plain.device_name}))
    mem = _memory_case(w, step, device, report, baseline)
    if mem is not None:
        cases.append(mem)
    return StepResult(tuple(cases), report, model, timing, capture_s)
