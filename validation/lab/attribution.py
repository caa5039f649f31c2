"""Which fitted parameters carry the difference between two calibrations' predictions (issue 12).

Two back-to-back calibrations of a noisy machine can predict a model's step 12 % apart while their
benchmarks' medians moved 3 %: the difference is then the fit amplifying noise in a few parameters
(a rate taken from the difference of two paired timings, a ramp the grid barely constrains), not the
machine as a whole. :func:`attribution` swaps one fitted quantity at a time from profile B into
profile A — a scalar field of ``Efficiency``, or one entry of a per-class / per-kind map — and
re-predicts every model, so the report names the quantities whose swap alone moves a prediction.
Swaps do not add up exactly (the cost is a max of legs, and curves interact); the table also gives
the whole difference.
"""

from __future__ import annotations

from collections.abc import Sequence

from simtrain.specs.hardware import Device, Efficiency
from validation.steps import predict_step

__all__ = ["swaps", "attribution", "attribution_lines", "SHOWN_PCT"]

_NOT_COSTED = frozenset({"source", "extra"})
"""Efficiency fields that describe a profile and price nothing."""

SHOWN_PCT = 1.0
"""A swap is listed where it moves some model's prediction by at least this many percent."""


def _key_name(key) -> str:
    return str(getattr(key, "value", key))


def swaps(a: Efficiency, b: Efficiency) -> dict[str, dict]:
    """Each fitted quantity where ``b`` differs from ``a``, named ``field`` or ``field[key]``, with the
    update that gives ``a`` that quantity of ``b`` (a key ``b`` lacks is removed)."""
    out: dict[str, dict] = {}
    for name in type(a).model_fields:
        va, vb = getattr(a, name), getattr(b, name)
        if name in _NOT_COSTED or va == vb:
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            for key in sorted(set(va) | set(vb), key=_key_name):
                if va.get(key) != vb.get(key):
                    merged = {k: v for k, v in va.items() if k != key}
                    if key in vb:
                        merged[key] = vb[key]
                    out[f"{name}[{_key_name(key)}]"] = {name: merged}
        else:
            out[name] = {name: vb}
    return out


def _predict(models: Sequence[tuple], device: Device, eff: Efficiency) -> list[float]:
    dev = device.model_copy(update={"efficiency": eff})
    return [predict_step(model, dev, w.batch, w.optimizer).step_time_s for w, model in models]


def attribution(models: Sequence[tuple], a: Device, b: Device) -> dict:
    """For ``models`` ((workload, Model) pairs): B's prediction over A's, and per swap of one of B's
    quantities into A the prediction over A's, each in percent; swaps that move no model by
    :data:`SHOWN_PCT` are left out, the rest ordered by their largest move."""
    ea, eb = a.efficiency, b.efficiency
    base = _predict(models, a, ea)
    whole = [100.0 * (x / y - 1.0) for x, y in zip(_predict(models, a, eb), base, strict=True)]
    moved = {}
    for name, update in swaps(ea, eb).items():
        pct = [100.0 * (x / y - 1.0) for x, y in zip(_predict(models, a, ea.model_copy(update=update)), base,
                                                       strict=True)]
        if max(map(abs, pct)) >= SHOWN_PCT:
            moved[name] = pct
    ordered = dict(sorted(moved.items(), key=lambda kv: -max(map(abs, kv[1]))))
    return {"cases": [w.case for w, _ in models], "whole_pct": whole, "swaps_pct": ordered}


def attribution_lines(result: dict) -> list[str]:
    """The attribution as a markdown section: one column per model, one row per swap."""
    short = [c.split("/")[0] for c in result["cases"]]
    lines = ["## Which fitted quantities carry the difference", "",
             "Each row swaps one quantity of calibration B into A and re-predicts (percent of A's prediction); "
             f"quantities that move no model by {SHOWN_PCT:.0f} % are left out. Swaps do not add up exactly.", "",
             "| quantity | " + " | ".join(short) + " |", "|---|" + "---:|" * len(short),
             "| **B whole** | " + " | ".join(f"**{x:+.1f}**" for x in result["whole_pct"]) + " |"]
    for name, pct in result["swaps_pct"].items():
        lines.append(f"| `{name}` | " + " | ".join(f"{x:+.1f}" for x in pct) + " |")
    return [*lines, ""]
