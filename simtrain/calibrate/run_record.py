"""What one-shot calibration reads and writes: a measured run (:class:`RunRecord`), each record after
the fit (:class:`RecordFit`), a profiler-trace group (:class:`ClassFit`) and the result
(:class:`Calibration`, written and read back as YAML by :func:`load_calibration`). The fit itself is
:func:`simtrain.calibrate.runs.calibrate_runs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from simtrain.calibrate.factors import check_factors, scaled_cluster
from simtrain.calibrate.memory_term import with_memory_scale
from simtrain.errors import SpecError
from simtrain.specs.base import Spec
from simtrain.specs.hardware import Cluster

__all__ = ["RunRecord", "RecordFit", "ClassFit", "Calibration", "load_calibration"]


@dataclass(frozen=True)
class RunRecord:
    """One measured run: what was trained, on what, how, and the measured step time (and memory)."""

    model: Any
    cluster: Any
    config: Any
    step_time_s: float
    peak_memory_bytes: float | None = None
    """Measured peak memory of the busiest rank, if known: ``torch.cuda.max_memory_reserved`` or
    ``max_memory_allocated``, as ``peak_memory_kind`` says."""
    name: str = ""
    peak_memory_kind: str = "reserved"
    """Which peak ``peak_memory_bytes`` is: "reserved" (what the process took from the device, the
    figure nvidia-smi and most framework logs show) or "allocated" (the tensors alone). The memory
    residual compares it with the matching prediction (``MemoryReport.reserved_bytes`` or
    ``total_bytes``)."""

    def __post_init__(self) -> None:
        from simtrain.graph.model import Model
        from simtrain.specs.train import TrainConfig
        where = f"RunRecord {self.name!r}" if self.name else "RunRecord"
        for field, kind in (("model", Model), ("cluster", Cluster), ("config", TrainConfig)):
            if not isinstance(getattr(self, field), kind):
                raise SpecError.one(where, field, f"must be a {kind.__name__} (got {type(getattr(self, field)).__name__}); "
                                    f"load it with st.load_{field if field != 'config' else 'job'} or build it")
        if self.peak_memory_kind not in ("reserved", "allocated"):
            raise SpecError.one(where, "peak_memory_kind", f"must be 'reserved' or 'allocated' "
                                f"(got {str(self.peak_memory_kind)[:40]!r})")
        for field in ("step_time_s", "peak_memory_bytes"):
            v = getattr(self, field)
            if v is None and field == "peak_memory_bytes":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SpecError.one(where, field, "must be a finite number > 0")

    @property
    def label(self) -> str:
        return self.name or f"{self.model.name} on {self.cluster.devices_count} × {self.cluster.device.name}"

    @classmethod
    def from_profiler_trace(cls, path: str | Path, model, cluster, config, steps: int | None = None,
                            name: str = "") -> RunRecord:
        """A run whose step time is the mean marked step of a ``torch.profiler`` trace (ProfilerStep#
        or Optimizer.step# spans; :mod:`simtrain.calibrate.trace`). For per-class factors from the
        same trace use :func:`simtrain.calibrate.trace_fit.calibrate_classes`."""
        from simtrain.calibrate.trace import read_profiler_trace
        from simtrain.inputs import as_cluster, as_config, as_model
        times = read_profiler_trace(path, steps=steps)
        if times.step_s is None:
            raise SpecError.one(str(path), "traceEvents", "no step markers to time a step by (profile with "
                                "torch.profiler's schedule and prof.step(), or a torch.optim optimizer)")
        return cls(model=as_model(model), cluster=as_cluster(cluster), config=as_config(config),
                   step_time_s=times.step_s, name=name or Path(path).name)


class RecordFit(Spec):
    """One record after the fit: measured vs predicted (and the same with it left out)."""

    name: str
    measured_s: float
    predicted_s: float
    loo_predicted_s: float | None = None
    measured_memory_bytes: float | None = None
    """The run's measured peak memory (``RunRecord.peak_memory_bytes``), if given."""
    predicted_memory_bytes: float | None = None
    """Predicted peak reserved bytes of the busiest rank (``StepReport.memory.reserved_bytes``)."""
    predicted_allocated_bytes: float | None = None
    """Predicted peak allocated bytes of that rank (``StepReport.memory.total_bytes``)."""
    memory_kind: str = "reserved"
    """Which peak the measured number is (``RunRecord.peak_memory_kind``): the residual compares it
    with the prediction of the same kind."""
    memory_capacity_bytes: Annotated[float, Field(gt=0)] | None = None
    """That rank's usable device memory: predicted reserved above it is a run predicted not to fit."""

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def memory_error(self) -> float | None:
        """Relative memory residual predicted / measured − 1 (None without both numbers)."""
        predicted = self.predicted_allocated_bytes if self.memory_kind == "allocated" else self.predicted_memory_bytes
        if predicted is None or not self.measured_memory_bytes:
            return None
        return predicted / self.measured_memory_bytes - 1.0

    @property
    def predicted_overflow(self) -> bool:
        """True when the predicted reserved bytes exceed the usable capacity."""
        return (self.predicted_memory_bytes is not None and self.memory_capacity_bytes is not None
                and self.predicted_memory_bytes > self.memory_capacity_bytes)

    @property
    def loo_error(self) -> float | None:
        return None if self.loo_predicted_s is None else self.loo_predicted_s / self.measured_s - 1.0


class ClassFit(Spec):
    """One group of a profiler trace (an op class, ``optimizer``, ``unmapped``): seconds per step."""

    group: str
    measured_s: Annotated[float, Field(ge=0)]
    predicted_s: Annotated[float, Field(ge=0)]
    """Before the fit."""
    fitted_s: Annotated[float, Field(ge=0)]
    """With the fitted factors."""
    units: Annotated[float, Field(ge=0)] = 0.0
    """Top-level op calls per step in the trace."""
    fitted: bool = False
    """True when the group had enough time to take part in the fit."""


class Calibration(Spec):
    """Fitted stack-level factors and how well they hold."""

    factors: dict[str, Annotated[float, Field(gt=0)]]
    """Fitted multipliers (see :data:`FACTORS`); factors not fitted are absent (= 1)."""
    uncertainty: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=True)]] = Field(default_factory=dict)
    """Relative standard error of each fitted factor (0.03 = ±3 %; inf when the runs cannot pin it)."""
    loo_error: Annotated[float, Field(ge=0)] | None = None
    """Mean absolute leave-one-out error of the step time (None with one record)."""
    records: list[RecordFit] = Field(default_factory=list)
    stack: str | None = None
    """The stack the records ran (the factors belong to it)."""
    device: str | None = None
    source: str = "st.calibrate_runs"
    classes: list[ClassFit] = Field(default_factory=list)
    """Per op class of a profiler-trace calibration (st.calibrate_classes): measured vs predicted."""
    measured_step_s: Annotated[float, Field(gt=0)] | None = None
    """The traced run's mean step wall time (None without step markers)."""
    warnings: tuple[str, ...] = ()
    """One line per record that ran although predicted not to fit in memory (its time fitted anyway)."""
    memory_scale: Annotated[float, Field(gt=0)] | None = None
    """Fitted ``Stack.transient_memory_scale`` from the records' measured peaks (None: no record gave one)."""
    memory_scale_uncertainty: Annotated[float, Field(ge=0, allow_inf_nan=True)] | None = None
    """Its relative standard error (inf when it sits at a bound of ``MEMORY_SCALE_BOUNDS``)."""

    def model_post_init(self, _context) -> None:
        check_factors(self.factors)

    def apply(self, cluster):
        """``cluster`` with the fitted factors applied to its device's efficiency profile."""
        return scaled_cluster(cluster, self.factors, f"calibration ({self.source})")

    def config(self, cfg, device=None):
        """``cfg`` with the fitted memory term on its stack (unchanged when no peak was fitted); ``device``
        picks the stack a config naming none runs (the GPU default)."""
        if self.memory_scale is None:
            return cfg
        return with_memory_scale(cfg, device, self.memory_scale)

    def to_yaml(self, path: str | Path) -> Path:
        import yaml

        from simtrain.outputs import YAML_SUFFIXES, check_output_path
        path = check_output_path(path, "path", YAML_SUFFIXES)  # its folder made; a directory refused
        doc = {"spec": "calibration", **self.model_dump(mode="json")}
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return path

    def summary(self) -> str:
        what = f"{len(self.records)} run(s)" if self.records or not self.classes else self.source
        lines = [f"calibration of stack {self.stack or '(none named)'} on {self.device or '?'}: {what}"]
        for name, value in self.factors.items():
            lines.append(f"  {name:<18} {value:.3f} ± {100 * self.uncertainty.get(name, float('nan')):.1f} %")
        if self.memory_scale is not None:
            unc = self.memory_scale_uncertainty if self.memory_scale_uncertainty is not None else float("nan")
            lines.append(f"  {'memory (transient)':<18} {self.memory_scale:.3f} ± {100 * unc:.1f} %  "
                         "(Calibration.config applies it)")
        for r in self.records:
            loo = "" if r.loo_error is None else f"   left out {100 * r.loo_error:+.1f} %"
            lines.append(f"  {r.name:<40} measured {r.measured_s:.4g} s  fitted {100 * r.error:+.1f} %{loo}")
            lines += _memory_lines(r)
        if self.loo_error is not None:
            lines.append(f"  leave-one-out mean |error| {100 * self.loo_error:.1f} %")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines + self._class_lines())

    def _class_lines(self) -> list[str]:
        if not self.classes:
            return []
        lines = [f"  {'group':<12} {'measured':>11} {'predicted':>11} {'fitted':>11}   per step"]
        for c in self.classes:
            mark = "" if c.fitted else ("   (not in the model)" if c.predicted_s == 0 else "   (too little time: factor 1)")
            lines.append(f"  {c.group:<12} {1e3 * c.measured_s:>8.3f} ms {1e3 * c.predicted_s:>8.3f} ms "
                         f"{1e3 * c.fitted_s:>8.3f} ms{mark}")
        if self.measured_step_s is not None:
            covered = sum(c.measured_s for c in self.classes)
            lines.append(f"  step {1e3 * self.measured_step_s:.3f} ms, of which {100 * covered / self.measured_step_s:.0f} % "
                         "inside ops (the rest: Python and the autograd engine between them)")
        return lines


def _memory_lines(r: RecordFit) -> list[str]:
    """The record's memory: predicted reserved vs usable, and vs measured when the run gave it."""
    from simtrain.report.format import format_bytes
    if r.predicted_memory_bytes is None:
        return []
    cap = "" if r.memory_capacity_bytes is None else f" of {format_bytes(r.memory_capacity_bytes)} usable"
    over = "  (predicted not to fit)" if r.predicted_overflow else ""
    measured = "" if r.memory_error is None else (f"  measured {format_bytes(r.measured_memory_bytes)} "
                                                  f"{r.memory_kind}  memory {100 * r.memory_error:+.1f} %")
    alloc = "" if r.predicted_allocated_bytes is None else f" ({format_bytes(r.predicted_allocated_bytes)} allocated)"
    return [f"    memory: predicted {format_bytes(r.predicted_memory_bytes)} reserved{alloc}{cap}{measured}{over}"]


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration written by ``Calibration.to_yaml`` (safe YAML, validated, size-capped)."""
    from pydantic import ValidationError

    from simtrain.specs.base import spec_error_from_validation
    from simtrain.specs.reading import read_yaml_file
    path = Path(path)
    doc, _ = read_yaml_file(path, limit=4 * 2**20, what="calibration")  # regular file, capped, bounded YAML
    if not isinstance(doc, dict) or doc.pop("spec", None) != "calibration":
        raise SpecError.one(str(path), "spec", "not a calibration file: it starts with 'spec: calibration'")
    try:
        return Calibration.model_validate(doc)
    except ValidationError as err:
        raise spec_error_from_validation(err, str(path)) from None
    except SpecError as err:
        raise SpecError.one(str(path), "factors", str(err)) from None
