"""Efficiency parameters of a device: data, not code. Defaults per device kind live in
hardware_specs/efficiency/<kind>.yaml; a device may carry its own block; st.calibrate fits them."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from simtrain.glossary import OpClass
from simtrain.specs.base import Seconds, Spec

__all__ = ["ComputeCurve", "Efficiency", "Fraction"]

Fraction = Annotated[float, Field(gt=0, le=1)]


# ----------------------------------------------------------------------------------------------
class ComputeCurve(Spec):
    """Achieved fraction of peak as a function of op size: ``peak_fraction · f / (f + half_flops)``.

    ``peak_fraction`` is the large-op ceiling (for matmuls: max achievable matmul FLOP/s over the
    datasheet peak, "MAMF"); ``half_flops`` is the op size (FLOPs) at which half the ceiling is reached.
    """

    peak_fraction: Fraction
    half_flops: Annotated[float, Field(ge=0)] = 0.0


class Efficiency(Spec):
    """Efficiency parameters of one device (defaults per kind; fitted by ``st.calibrate``)."""

    library_kind: ClassVar[str | None] = "efficiency"

    compute: dict[OpClass, ComputeCurve]
    memory_bandwidth_fraction: Fraction = 0.85
    memory_half_bytes: Annotated[float, Field(ge=0)] = 0.0
    launch_overhead_s: Seconds = 0.0
    link_bandwidth_fraction: Fraction = 0.8
    link_latency_scale: Annotated[float, Field(gt=0, le=1000)] = 1.0
    source: str = "default"
    extra: dict[str, float] = Field(default_factory=dict)

    def curve(self, op_class: OpClass) -> ComputeCurve:
        try:
            return self.compute[op_class]
        except KeyError:
            from simtrain.errors import MissingRuleError
            raise MissingRuleError(f"efficiency has no curve for op class {op_class!s}") from None


