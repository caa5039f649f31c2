"""Measured runs from a file: ``load_run_records(path)`` → a list of :class:`~simtrain.calibrate.runs.RunRecord`.

A CSV (header row) or JSON Lines file (one object per line), one run per row. Columns:

* ``model`` — a library name or a model YAML path (required);
* ``hardware`` (or ``cluster``) — a device or cluster library name or path (required); ``nodes``
  optionally scales a cluster;
* ``step_time_s`` (required, > 0) and ``peak_memory_bytes`` (optional), with ``peak_memory_kind``
  "reserved" (default) or "allocated";
* ``name`` (optional label);
* every other column is a :class:`~simtrain.specs.train.TrainConfig` field (``global_batch_size``,
  ``micro_batch_size``, ``seq_len``, ``precision``, ``optimizer``, ``tp``, ``stack``, …).

Strict: an unknown column, a missing value or a bad one raises :class:`~simtrain.errors.SpecError`
naming the file, the line and the column; empty CSV cells mean "not given". CSV cells are read as
JSON when they parse (``8`` → 8, ``true`` → True) and as text otherwise.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from simtrain.calibrate.runs import RunRecord
from simtrain.errors import SimtrainError, SpecError

__all__ = ["load_run_records", "record_from_row", "RUN_COLUMNS"]



RUN_COLUMNS = ("model", "hardware", "cluster", "nodes", "step_time_s", "peak_memory_bytes", "peak_memory_kind",
               "name")


def _cell(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) pairs; CSV cells parsed by :func:`_cell`, empty cells dropped."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        out = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as err:
                raise SpecError.one(f"{path}:{i}", "(line)", f"not valid JSON: {err.msg}") from None
            if not isinstance(obj, dict):
                raise SpecError.one(f"{path}:{i}", "(line)", "each line must be a JSON object")
            out.append((i, {k: v for k, v in obj.items() if v is not None}))
        return out
    if path.suffix.lower() != ".csv":
        raise SpecError.one(str(path), "(file)", "runs file must end in .csv or .jsonl")
    reader = csv.DictReader(text.splitlines())
    return [(i, {k: _cell(v) for k, v in row.items() if k is not None and v not in (None, "")})
            for i, row in enumerate(reader, start=2)]


def _required(where: str, row: dict, *names: str) -> Any:
    for n in names:
        if n in row:
            return row[n]
    raise SpecError.one(where, names[0], "missing (required)")


def _loaded(where: str, column: str, load):
    try:
        return load()
    except SpecError as err:
        issue = err.issues[0]
        raise SpecError.one(where, column, f"{issue.field}: {issue.reason}" if issue.field != column else issue.reason) \
            from None
    except (SimtrainError, OSError, ValueError) as err:
        raise SpecError.one(where, column, str(err)) from None


def record_from_row(row: dict[str, Any], where: str):
    """One :class:`RunRecord` from one row; errors name ``where`` (``file:line``) and the column."""
    from pydantic import ValidationError

    from simtrain.inputs import as_cluster, as_model
    from simtrain.specs.train import TrainConfig
    cfg_fields = {k: v for k, v in row.items() if k not in RUN_COLUMNS}
    unknown = [k for k in cfg_fields if k not in TrainConfig.model_fields]
    if unknown:
        raise SpecError.one(where, unknown[0], f"unknown column; known: {', '.join(RUN_COLUMNS)} and TrainConfig fields")
    model = _loaded(where, "model", lambda: as_model(str(_required(where, row, "model"))))
    cluster = _loaded(where, "hardware", lambda: as_cluster(str(_required(where, row, "hardware", "cluster")),
                                                            nodes=row.get("nodes")))
    try:
        cfg = TrainConfig.model_validate(cfg_fields)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        col = ".".join(str(p) for p in first.get("loc", ())) or "(config)"
        raise SpecError.one(where, col, first.get("msg", "invalid")) from None
    try:
        return RunRecord(model=model, cluster=cluster, config=cfg,
                         step_time_s=_required(where, row, "step_time_s"),
                         peak_memory_bytes=row.get("peak_memory_bytes"), name=str(row.get("name", "")),
                         peak_memory_kind=str(row.get("peak_memory_kind") or "reserved"))
    except SpecError as err:
        raise SpecError.one(where, err.issues[0].field, err.issues[0].reason) from None


def load_run_records(path: str | Path) -> list:
    """Every run of a CSV / JSONL file (see the module docstring); at least one."""
    path = Path(path)
    if not path.is_file():
        raise SpecError.one(str(path), "(file)", "no such runs file")
    records = [record_from_row(row, f"{path}:{line}") for line, row in _rows(path)]
    if not records:
        raise SpecError.one(str(path), "(file)", "no runs in the file")
    return records
