"""Measurement records: one frozen :class:`Row` per benchmarked configuration, and the
:class:`Measurements` set (rows + machine facts + run settings) with JSON (and optional Parquet)
storage and a content hash that keys calibration profiles.

Every row carries first-principles work counts next to its times, so the fit never re-derives them:
``flops`` (one FMA = 2 FLOPs) and ``bytes_moved`` (reads + writes of the op's tensors at its dtype,
assuming each tensor crosses main memory once), and ``calls`` (op executions per timed call: >1 for
a for-loop optimizer step, whose per-tensor kernels each pay a launch).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simtrain.errors import SimtrainError, SpecError
from simtrain.glossary import DType, OpClass

__all__ = ["Row", "Unsupported", "MachineFacts", "Measurements", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
#: the largest measurements file read (JSON or Parquet), in bytes
MAX_MEASUREMENTS_BYTES = 64 * 2**20
_PHASES = ("fw", "bw", "optim")


def _frozen_map(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted((d or {}).items())))


@dataclass(frozen=True)
class Row:
    """One benchmark configuration and its time per call (median and spread over ``repeats`` samples).

    ``op_class`` is ``None`` for work that is not a compute op of the cost layer (collectives,
    host↔device copies); those rows are fitted to link models, not to the roofline.
    """

    bench: str
    op_class: OpClass | None
    dtype: DType
    params: Mapping[str, Any]
    flops: float
    bytes_moved: float
    median_s: float
    p10_s: float
    p90_s: float
    repeats: int
    phase: str = "fw"
    calls: int = 1
    device: str = "cpu"
    ci_low_s: float | None = None
    """95 % bootstrap interval of the median (simtrain/calibrate/robust.py); None in older files."""
    ci_high_s: float | None = None
    pass_medians_s: tuple[float, ...] | None = None
    """Each pass's median, in the order the passes ran, where the row merges several passes
    (robust.merge_passes): the paired benches pair their two sides within a pass (calibrate/modes.py).
    None for a single pass and in older files."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))
        if self.pass_medians_s is not None:
            object.__setattr__(self, "pass_medians_s", tuple(float(x) for x in self.pass_medians_s))
        if self.op_class is not None:
            object.__setattr__(self, "op_class", OpClass(self.op_class))
        object.__setattr__(self, "dtype", DType(self.dtype))
        if self.phase not in _PHASES:
            raise ValueError(f"Row.phase must be one of {_PHASES}, got {self.phase!r}")
        if not (self.median_s > 0 and math.isfinite(self.median_s)):
            raise ValueError(f"Row {self.bench}: median_s must be a positive finite time, got {self.median_s!r}")
        if not (self.p10_s <= self.median_s <= self.p90_s):
            raise ValueError(f"Row {self.bench}: need p10_s <= median_s <= p90_s")
        if self.flops < 0 or self.bytes_moved < 0 or self.repeats < 1 or self.calls < 1:
            raise ValueError(f"Row {self.bench}: flops, bytes_moved >= 0 and repeats, calls >= 1")

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.median_s

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.median_s

    def at_median(self, median_s: float) -> Row:
        """This row with its median at ``median_s``, its p10 / p90 widened to hold it (as a row must)."""
        return replace(self, median_s=median_s, p10_s=min(self.p10_s, median_s), p90_s=max(self.p90_s, median_s))

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.pass_medians_s is None:
            del d["pass_medians_s"]  # a single pass's row serialises (and hashes) as before the field existed
        else:
            d["pass_medians_s"] = list(self.pass_medians_s)
        d["params"] = dict(self.params)
        d["op_class"] = None if self.op_class is None else self.op_class.value
        d["dtype"] = self.dtype.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Row:
        return cls(**d)


@dataclass(frozen=True)
class Unsupported:
    """A benchmark the backend refused (e.g. reduce_scatter on an old gloo): recorded, not dropped."""

    bench: str
    params: Mapping[str, Any]
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))

    def to_dict(self) -> dict[str, Any]:
        return {"bench": self.bench, "params": dict(self.params), "reason": self.reason}


@dataclass(frozen=True)
class MachineFacts:
    """Where the numbers were taken. ``threads`` is torch.get_num_threads() during the compute benches."""

    cpu_model: str
    cpu_cores: int
    cpu_flags: tuple[str, ...]
    cpu_mhz: float | None
    torch_version: str
    threads: int
    device: str
    gpu_name: str | None = None
    gpu_count: int = 0
    cuda_version: str | None = None
    hostname_hash: str = ""
    date: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["cpu_flags"] = list(self.cpu_flags)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MachineFacts:
        d = dict(d)
        d["cpu_flags"] = tuple(d.get("cpu_flags", ()))
        return cls(**d)


@dataclass(frozen=True)
class Measurements:
    """The result of :func:`simtrain.calibrate.measure.measure`: rows, refusals, machine facts, settings."""

    rows: tuple[Row, ...]
    machine: MachineFacts
    settings: Mapping[str, Any] = field(default_factory=dict)
    unsupported: tuple[Unsupported, ...] = ()
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        object.__setattr__(self, "unsupported", tuple(self.unsupported))
        object.__setattr__(self, "settings", _frozen_map(self.settings))

    # --- views -------------------------------------------------------------------------------------
    def select(self, bench: str | None = None, op_class: OpClass | str | None = None,
               phase: str | None = None) -> tuple[Row, ...]:
        oc = None if op_class is None else OpClass(op_class)
        return tuple(r for r in self.rows if (bench is None or r.bench == bench)
                     and (oc is None or r.op_class == oc) and (phase is None or r.phase == phase))

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of rows and machine facts (not wall time or the file name)."""
        payload = {"rows": [r.to_dict() for r in self.rows], "machine": self.machine.to_dict(),
                   "unsupported": [u.to_dict() for u in self.unsupported]}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "hash": self.hash, "machine": self.machine.to_dict(),
                "settings": dict(self.settings), "wall_s": self.wall_s,
                "unsupported": [u.to_dict() for u in self.unsupported],
                "rows": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], file: str | None = None) -> Measurements:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise SpecError.one(file, "schema_version", f"expected {SCHEMA_VERSION}, got {d.get('schema_version')!r}")
        try:
            rows = tuple(Row.from_dict(r) for r in d["rows"])
            unsup = tuple(Unsupported(**u) for u in d.get("unsupported", ()))
            machine = MachineFacts.from_dict(d["machine"])
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError.one(file, "rows", f"not a measurements file: {err}") from None
        return cls(rows, machine, d.get("settings", {}), unsup, float(d.get("wall_s", 0.0)))

    # --- storage -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """JSON (any suffix but ``.parquet``); Parquet rows + facts in the file metadata (needs pyarrow)."""
        from simtrain.outputs import check_output_path
        path = check_output_path(path, "path")  # its folder made; a directory or unwritable place refused
        if path.suffix == ".parquet":
            _save_parquet(self, path)
        else:
            path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Measurements:
        path = Path(path)
        if path.suffix == ".parquet":
            return _load_parquet(path)
        from simtrain.specs.reading import read_json_file
        doc = read_json_file(path, limit=MAX_MEASUREMENTS_BYTES, what="measurements")  # regular file, capped, checked JSON
        if not isinstance(doc, dict):
            raise SpecError.one(str(path), "", "not a measurements file: expected a JSON object")
        return cls.from_dict(doc, str(path))

    def to_dataframe(self):
        """One pandas row per measurement, params flattened as ``p_<name>`` columns."""
        import pandas as pd
        recs = []
        for r in self.rows:
            d = r.to_dict()
            params = d.pop("params")
            d.update({f"p_{k}": v for k, v in params.items()})
            recs.append(d)
        return pd.DataFrame.from_records(recs)


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise SimtrainError("Parquet needs pyarrow (pip install pyarrow); save as .json instead") from None
    return pyarrow, pq


def _save_parquet(m: Measurements, path: Path) -> None:
    pa, pq = _pyarrow()
    rows = [dict(r.to_dict(), params=json.dumps(dict(r.params), sort_keys=True)) for r in m.rows]
    table = pa.Table.from_pylist(rows)
    meta = {k: v for k, v in m.to_dict().items() if k != "rows"}
    table = table.replace_schema_metadata({b"simtrain": json.dumps(meta, sort_keys=True).encode()})
    pq.write_table(table, path)


def _load_parquet(path: Path) -> Measurements:
    """Measurements from an untrusted Parquet file: regular, size-capped, its JSON parts checked."""
    from simtrain.specs.reading import parse_json, read_bytes
    _, pq = _pyarrow()
    import pyarrow as pa
    data = read_bytes(path, limit=MAX_MEASUREMENTS_BYTES, what="measurements")
    try:
        table = pq.read_table(pa.BufferReader(data))
        meta = parse_json((table.schema.metadata or {})[b"simtrain"].decode("utf-8"))
        rows = [dict(r, params=parse_json(r["params"])) for r in table.to_pylist()]
    except KeyError as err:
        raise SpecError.one(str(path), "", f"not a measurements file: no {err.args[0]!r} in it") from None
    except (pa.ArrowException, ValueError, TypeError, AttributeError) as err:  # broken file, bad JSON
        raise SpecError.one(str(path), "", f"not a measurements file: {type(err).__name__}: {err}") from None
    if not isinstance(meta, dict):
        raise SpecError.one(str(path), "", "not a measurements file: its metadata is not a JSON object")
    return Measurements.from_dict(dict(meta, rows=rows), str(path))
