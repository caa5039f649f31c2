"""The framework's per-op cost inside a training step, measured on a synthetic chain — not on the zoo.

``st.calibrate`` fits ``launch_overhead_s`` to ops timed one at a time in a tight loop (the dispatcher's
cost). Inside a training step each torch call also records an autograd node in forward, the engine
executes that node in backward, and Python runs the module's ``__call__``; on a CPU those costs are
µs per op, the same order as a small op's work. They are measured here as a calibration microbenchmark:

* a chain of ``depth`` blocks ``Linear(8, 8) → ReLU`` on a (2, 8) input — work per op is a few hundred
  FLOPs, so its step time is almost all per-op cost; trained (forward, loss = mean of squares,
  backward) at depths 8, 24, 48, 96 with the calibration's thread count;
* simtrain's prediction of each chain with the calibrated device (its ``compute`` term) and, from the
  same estimate with the launch overhead raised by ε, the number of op launches ``n`` it charges
  (``compute`` is linear in ``launch_overhead_s`` with slope ``n``: exact, no rule is re-derived);
* a robust line ``measured − predicted = δ · n + c`` over the depths (Theil 1950 / Sen 1968: ``δ`` the
  median of the pairwise slopes, ``c`` the median intercept; one noisy depth cannot tip it): ``δ`` is
  the per-launch cost
  the single-op benchmarks miss, ``c`` the per-step fixed cost (``zero_grad``, the backward engine's
  start and finish, the step loop's own Python).

The step-time device is the calibrated device with ``launch_overhead_s + δ`` (every class's issue time
too, named ``….step``) and, where the line's slope came out non-negative, ``c`` as
``Efficiency.step_host_overhead_s``: a negative slope leaves the intercept an artefact of the clamp,
not a cost. (The CPU records up to 2026-12-05 had one: each imported layer's module path was in its op
signature, so every layer of the chain paid its in-step launch at the whole step's gap and the chain
was over-predicted at depth; parallel/model_index.op_signature leaves the path out since.) The chain
is not a zoo model and its times never see the zoo's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

import simtrain as st
from simtrain.cost.compute import device_efficiency
from simtrain.specs.hardware import Device

__all__ = ["StepOverhead", "chain", "fit_step_overhead", "overhead_from", "with_step_overhead", "theil_sen", "DEPTHS"]

DEPTHS = (8, 24, 48, 96)
_EPS_S = 1e-3


@dataclass(frozen=True)
class StepOverhead:
    per_launch_s: float
    """δ: added to launch_overhead_s for training steps."""
    per_step_s: float
    """c: the line's intercept, the fixed per-step cost."""
    rows: tuple[dict, ...]
    fitted_slope_s: float = 0.0
    """δ before the clamp at 0: negative when the chain is over-predicted at depth."""

    @property
    def step_host_s(self) -> float:
        """The per-step cost charged (``Efficiency.step_host_overhead_s``): ``c`` where the slope it was
        fitted with was not negative and ``c`` is positive, else 0."""
        return max(0.0, self.per_step_s) if self.fitted_slope_s >= 0 else 0.0

    def to_dict(self) -> dict:
        return {"per_launch_s": self.per_launch_s, "per_step_s": self.per_step_s, "rows": list(self.rows),
                "fitted_slope_s": self.fitted_slope_s, "step_host_s": self.step_host_s}


def chain(depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(8, 8), nn.ReLU()]
    return nn.Sequential(*layers)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def _measure(module: nn.Module, x: torch.Tensor, warmup: int, repeats: int, device: str) -> float:
    from validation.steps import time_steps

    def step() -> None:
        module.zero_grad(set_to_none=True)
        _loss(module(x)).backward()
    return time_steps(step, device, warmup, repeats).median_s


def _predict(model, device_spec: Device) -> tuple[float, float]:
    """(predicted fw + bw seconds, launches charged) of one step at batch 2."""
    from validation.steps import train_config
    cfg = train_config(2, "sgd")
    base = st.estimate(model, st.Cluster.single(device_spec), cfg).time_breakdown_s["compute"]
    bumped = with_launch(device_spec, _EPS_S, "eps")
    raised = st.estimate(model, st.Cluster.single(bumped), cfg).time_breakdown_s["compute"]
    return base, (raised - base) / _EPS_S


def with_launch(device_spec: Device, extra_s: float, tag: str) -> Device:
    """``device_spec`` with every launch ``extra_s`` dearer: the shared figure and each class's own."""
    eff = device_efficiency(device_spec)
    eff = eff.model_copy(update={
        "launch_overhead_s": eff.launch_overhead_s + extra_s,
        "class_launch_overhead_s": {c: s + extra_s for c, s in eff.class_launch_overhead_s.items()},
        "backward_class_launch_overhead_s": {c: s + extra_s for c, s in eff.backward_class_launch_overhead_s.items()}})
    return device_spec.model_copy(update={"efficiency": eff, "name": f"{device_spec.name[:56]}.{tag}"})


def fit_step_overhead(device_spec: Device, device: str = "cpu", warmup: int = 5, repeats: int = 15,
                      depths: tuple[int, ...] = DEPTHS) -> StepOverhead:
    """Measure the chains and fit (δ, c); see the module docstring."""
    measured = {}
    for depth in depths:
        torch.manual_seed(0)
        measured[depth] = _measure(chain(depth).to(device), torch.randn(2, 8, device=device), warmup, repeats, device)
    return overhead_from(device_spec, measured)


def overhead_from(device_spec: Device, measured_s: dict[int, float]) -> StepOverhead:
    """(δ, c) from the chains' measured step seconds by depth, however they were timed (here, or on a
    leased GPU by validation/step_times.py): each chain predicted with ``device_spec``."""
    rows = []
    for depth, measured in measured_s.items():
        torch.manual_seed(0)
        model = st.Model.from_torch(chain(depth), (torch.randn(2, 8),), _loss, name=f"chain{depth}")
        predicted, launches = _predict(model, device_spec)
        rows.append({"depth": depth, "measured_s": measured, "predicted_s": predicted, "launches": launches})
    slope, intercept = theil_sen([r["launches"] for r in rows], [r["measured_s"] - r["predicted_s"] for r in rows])
    return StepOverhead(max(0.0, slope), intercept, tuple(rows), slope)


def theil_sen(x, y) -> tuple[float, float]:
    """(median pairwise slope, median of y − slope·x)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    slopes = [(y[j] - y[i]) / (x[j] - x[i]) for i in range(len(x)) for j in range(i + 1, len(x)) if x[j] != x[i]]
    slope = float(np.median(slopes))
    return slope, float(np.median(y - slope * x))


def with_step_overhead(device_spec: Device, fit: StepOverhead) -> Device:
    """The calibrated device with ``launch_overhead_s + δ`` (see module docstring)."""
    out = with_launch(device_spec, fit.per_launch_s, "step")
    extra = dict(out.efficiency.extra, **{"validation.step_overhead.per_launch_s": fit.per_launch_s,
                                          "validation.step_overhead.per_step_s": fit.per_step_s})
    eff = out.efficiency.model_copy(update={"extra": extra, "step_host_overhead_s": fit.step_host_s})
    return out.model_copy(update={"efficiency": eff})
