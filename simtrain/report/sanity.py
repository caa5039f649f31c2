"""Sanity warnings on a StepReport: implausible MFU/HFU and other results worth a second look.

``sanity_warnings(report, device_kind=..., model_class=...)`` returns a tuple of sentences (empty
when nothing is odd). It is pure, reads only the report and the packaged table of the highest
publicly reported MFU (``public_mfu.yaml``, read through importlib.resources), and never raises:
a failure inside a check comes back as one warning saying the checks were skipped. Infeasible
reports get no warnings (their ``reasons`` already say what is wrong).

The checks and their thresholds (named constants below):

* MFU or HFU above 100 % of the dense peak: impossible, the efficiencies or the peak are wrong.
* MFU more than ``MFU_MARGIN`` (relative) above the best public figure for the device family and
  model class (falling back to the best of any device of the same kind), with figure and source.
* hardware FLOPs below model FLOPs (HFU < MFU): recomputation can only add work.
* exposed communication above ``COMM_BOUND_SHARE`` of the step: communication-bound.
* data stall above ``DATA_STALL_SHARE`` of the step: the input pipeline starves the devices.
* peak memory above ``MEMORY_FULL_SHARE`` of the usable capacity: fits on paper, little headroom.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

__all__ = [
    "sanity_warnings", "accelerator_notes", "model_class_of", "public_mfu", "PublicMfu", "MfuRecord", "DeviceFamily",
    "MFU_MARGIN", "COMM_BOUND_SHARE", "DATA_STALL_SHARE", "MEMORY_FULL_SHARE", "MODEL_CLASSES", "PRECISIONS",
    "precision_class",
]

MFU_MARGIN = 0.10
"""Relative margin over the highest public MFU before a prediction is flagged. Published records
come from heavily tuned runs, so a prediction may match one and a smaller, better-fitting job may
beat one by a few percent; efficiencies set too high (a matmul ceiling used as an end-to-end
figure, ideal links) overshoot by far more than 10 %."""
COMM_BOUND_SHARE = 0.5
"""Exposed (un-overlapped) communication above this share of the step: flagged communication-bound."""
DATA_STALL_SHARE = 0.2
"""Data-loader stall above this share of the step: flagged."""
MEMORY_FULL_SHARE = 0.95
"""Peak device memory above this share of the usable capacity: flagged (allocator fragmentation and
unmodelled buffers can push such a layout over)."""
MODEL_CLASSES = ("dense-transformer", "moe", "other")
DATA_FILE = "public_mfu.yaml"


@dataclass(frozen=True, slots=True)
class DeviceFamily:
    """Devices whose public MFU records are comparable (same matrix engine generation)."""

    name: str
    kind: str
    label: str
    match: tuple[str, ...]

    def matches(self, device_name: str) -> bool:
        """True when one of the tokens appears in the name as a whole token ("a100" not "a1000")."""
        name = device_name.lower()
        return any(re.search(rf"(?<![a-z0-9]){re.escape(t.lower())}(?![0-9])", name) for t in self.match)


@dataclass(frozen=True, slots=True)
class MfuRecord:
    """One publicly reported MFU: which run, and where the number is printed."""

    family: str
    model_class: str
    value: float
    run: str
    source: str
    hfu: float | None = None
    note: str = ""
    precision: str = "16-bit"
    """The matmul precision of the run, whose dense peak its MFU divides by: ``16-bit`` (bf16 / fp16) or
    ``fp8``. An fp8 run's MFU (over the doubled fp8 peak) is held only against fp8 records."""


PRECISIONS = ("16-bit", "fp8", "fp4")


def precision_class(matmul_dtype: str | None) -> str:
    """``fp8`` for an fp8 matmul dtype, else ``16-bit`` (the class the public records are kept in)."""
    return {"fp8": "fp8", "fp4": "fp4"}.get(str(matmul_dtype), "16-bit")


@dataclass(frozen=True)
class PublicMfu:
    """The packaged table: device families and their MFU records."""

    families: tuple[DeviceFamily, ...]
    records: tuple[MfuRecord, ...]

    def family_of(self, device_name: str) -> DeviceFamily | None:
        return next((f for f in self.families if f.matches(device_name)), None)

    def best(self, device_name: str, device_kind: str | None = None,
             model_class: str | None = None, precision: str = "16-bit") -> tuple[MfuRecord, str] | None:
        """The highest record that applies and the words for its scope, or None when none does.

        Only records of the run's matmul ``precision``; the device's family first (records of the same
        model class, else of any class); without a record there, the best of every family of the same
        device kind."""
        fam = self.family_of(device_name)
        kind = device_kind or (fam.kind if fam else None)
        records = [r for r in self.records if r.precision == precision]
        if fam is not None:
            hit = _highest([r for r in records if r.family == fam.name], model_class)
            if hit is not None:
                rec, same_class = hit
                return rec, f"{fam.label} {model_class if same_class else 'any-model'} training"
        if kind is None:
            return None
        names = {f.name for f in self.families if f.kind == kind}
        hit = _highest([r for r in records if r.family in names], model_class)
        if hit is None:
            return None
        rec, same_class = hit
        label = next(f.label for f in self.families if f.name == rec.family)
        what = f"{model_class} training" if same_class else "training"
        return rec, f"{what} on any {kind.upper()} (the record is {label})"


def _highest(records: list[MfuRecord], model_class: str | None) -> tuple[MfuRecord, bool] | None:
    same = [r for r in records if model_class is not None and r.model_class == model_class]
    pool = same or records
    if not pool:
        return None
    return max(pool, key=lambda r: r.value), bool(same)


# --- the packaged table ------------------------------------------------------------------------
@lru_cache(maxsize=1)
def public_mfu() -> PublicMfu:
    """``public_mfu.yaml`` from the installed package (importlib.resources), parsed and checked."""
    text = resources.files("simtrain.report").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return _parse(yaml.safe_load(text))


def _parse(data: dict) -> PublicMfu:
    fams = tuple(DeviceFamily(name=str(k), kind=str(v["kind"]), label=str(v.get("label", k)),
                              match=tuple(str(t) for t in v["match"])) for k, v in data["families"].items())
    names = {f.name for f in fams}
    recs = []
    for i, r in enumerate(data["records"]):
        rec = MfuRecord(family=str(r["family"]), model_class=str(r["model_class"]), value=float(r["value"]),
                        run=str(r["run"]).strip(), source=str(r["source"]).strip(),
                        hfu=None if r.get("hfu") is None else float(r["hfu"]), note=str(r.get("note", "")).strip(),
                        precision=str(r.get("precision", "16-bit")))
        problems = [p for p, bad in (
            ("family is not in families", rec.family not in names),
            (f"model_class is not one of {MODEL_CLASSES}", rec.model_class not in MODEL_CLASSES),
            ("value must be in (0, 1]", not 0 < rec.value <= 1),
            ("hfu must be in [value, 1]", rec.hfu is not None and not rec.value <= rec.hfu <= 1),
            ("run and source must be given", not rec.run or not rec.source),
            (f"precision must be one of {PRECISIONS}", rec.precision not in PRECISIONS)) if bad]
        if problems:
            raise ValueError(f"{DATA_FILE}: records[{i}]: " + "; ".join(problems))
        recs.append(rec)
    return PublicMfu(fams, tuple(recs))


# --- the checks --------------------------------------------------------------------------------
def model_class_of(model) -> str:
    """dense-transformer | moe | other, from the model's attention and expert ops."""
    try:
        facts = model.layout_facts()
    except Exception:  # an odd model is "other", never an error
        return "other"
    if facts.get("experts"):
        return "moe"
    return "dense-transformer" if facts.get("heads") else "other"


def sanity_warnings(report, *, device_kind: str | None = None, model_class: str | None = None,
                    matmul_dtype: str | None = None) -> tuple[str, ...]:
    """Warnings for a feasible report (see the module docstring); () when nothing is odd. Never raises."""
    try:
        if not report.feasible or not (report.step_time_s > 0 and math.isfinite(report.step_time_s)):
            return ()
        found = [_impossible(report), _flops_order(report),
                 None if report.mfu > 1 else _above_public(report, device_kind, model_class,
                                                            precision_class(matmul_dtype)),
                 _share(report, "comm_exposed", COMM_BOUND_SHARE,
                        "communication-bound: exposed communication is {pct} of the step (more overlap, a "
                        "smaller tp/cp group or a faster fabric would shorten it)"),
                 _share(report, "data_stall", DATA_STALL_SHARE,
                        "data-bound: the input pipeline stalls the devices for {pct} of the step (more loader "
                        "workers, prefetching or a faster store)"),
                 _memory_full(report)]
        return tuple(w for w in found if w)
    except Exception as exc:  # a sanity check must never break an estimate
        return (f"sanity checks skipped: {type(exc).__name__}: {exc}",)


def _impossible(r) -> str | None:
    for name, value in (("MFU", r.mfu), ("HFU", r.hfu)):
        if value > 1:
            return (f"predicted {name} {value:.1%} exceeds 100% of the dense peak "
                    f"({r.peak_flops_per_s / 1e12:.4g} TFLOP/s): impossible; check the device's peak "
                    f"FLOP/s and its efficiency settings")
    return None


def _flops_order(r) -> str | None:
    if r.hardware_flops_per_step < r.model_flops_per_step * (1 - 1e-9):
        return (f"hardware FLOPs per step ({r.hardware_flops_per_step:.4g}) are below the model FLOPs "
                f"({r.model_flops_per_step:.4g}): HFU < MFU, but recomputation can only add work")
    return None


def _above_public(r, device_kind: str | None, model_class: str | None, precision: str = "16-bit") -> str | None:
    hit = public_mfu().best(r.device_name, device_kind, model_class, precision)
    if hit is None:
        return None
    rec, scope = hit
    if r.mfu <= rec.value * (1 + MFU_MARGIN):
        return None
    scope = scope if precision == "16-bit" else f"{scope} in {precision}"
    return (f"predicted MFU {r.mfu:.1%} exceeds the highest publicly reported for {scope} "
            f"({rec.value:.1%}, {rec.source}) by more than {MFU_MARGIN:.0%}: check the efficiency settings")


def _share(r, key: str, limit: float, text: str) -> str | None:
    share = r.time_breakdown_s.get(key, 0.0) / r.step_time_s
    return text.format(pct=f"{share:.0%}") if share > limit else None


def _memory_full(r) -> str | None:
    m = r.memory
    if m is None or not m.capacity_bytes or not m.fits:
        return None
    share = m.reserved_bytes / m.capacity_bytes
    if share <= MEMORY_FULL_SHARE:
        return None
    return (f"peak memory (rank {m.rank}) uses {share:.0%} of the usable device memory: it fits on paper, "
            f"but allocator fragmentation or unmodelled buffers may push it over")


# --- how an FPGA or a wafer runs the model --------------------------------------------------------
def accelerator_notes(report, device, model=None, weight_bytes: float = 2.0) -> tuple[str, ...]:
    """One line saying how the model runs on an FPGA (time-multiplexed or layer-pipelined) or a wafer
    (weight streaming or on-wafer fit, and why); () for other devices. Never raises."""
    try:
        from simtrain.cost.fpga import execution_note
        line = execution_note(device, model, weight_bytes) or _wafer_note(report, device)
        return (line,) if line else ()
    except Exception as exc:  # a note must never break an estimate
        return (f"accelerator note skipped: {type(exc).__name__}: {exc}",)


def _wafer_note(r, device) -> str | None:
    """hardware.md §7: weights stream from MemoryX unless parameters, gradients and optimizer state fit
    in the wafer's SRAM beside the activations."""
    if device.kind.value != "wafer" or r.memory is None:
        return None
    m, sram = r.memory, device.main_tier
    state = m.external_bytes or (m.params_bytes + m.grads_bytes + m.optimizer_bytes)
    room = sram.usable_bytes - m.activations_bytes
    fits = state <= room
    if device.memory_external is None:
        return (f"{device.name} holds everything on the wafer: parameters + gradients + optimizer state "
                f"{state / 1e9:.1f} GB in {sram.usable_bytes / 1e9:.1f} GB of {sram.name}")
    verdict = ("would fit on the wafer beside the activations; Cerebras could run it without streaming, so "
               "the streaming time is an upper bound" if fits else
               f"exceed the {max(room, 0) / 1e9:.1f} GB left beside the activations")
    return (f"{device.name} runs in weight-streaming mode: parameters + gradients + optimizer state "
            f"({state / 1e9:.1f} GB) live in {device.memory_external.name} and stream in layer by layer over "
            f"the system I/O; they {verdict} ({sram.usable_bytes / 1e9:.1f} GB of {sram.name})")
