"""Measured runs from a file: ``load_run_records(path)`` → a list of
:class:`~simtrain.calibrate.run_record.RunRecord`.

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

The file is untrusted input (simtrain/specs/reading.py): a regular file of at most
:data:`MAX_RUNS_BYTES`; UTF-8 (an undecodable byte is reported with its line and column); JSON nested
more than 64 levels deep, a key given twice or ``NaN`` / ``Infinity`` refused on the line that has it;
a CSV header naming a column twice or leaving one unnamed, and a row with more or fewer cells than
the header, refused with the line.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from simtrain.calibrate.run_record import RunRecord
from simtrain.errors import SimtrainError, SpecError
from simtrain.specs.reading import env_bytes, parse_json, read_bytes

__all__ = ["load_run_records", "record_from_row", "RUN_COLUMNS", "MAX_RUNS_BYTES"]

#: the largest runs file read, in bytes (env ``SIMTRAIN_MAX_RUNS_BYTES``; 16 MiB is ~50,000 runs)
MAX_RUNS_BYTES = env_bytes("SIMTRAIN_MAX_RUNS_BYTES", 16 << 20)

RUN_COLUMNS = ("model", "hardware", "cluster", "nodes", "step_time_s", "peak_memory_bytes", "peak_memory_kind",
               "name")


def _cell(text: str, where: str, column: str) -> Any:
    """A CSV cell: its JSON value when it parses (``8`` → 8, ``true`` → True), else the text. A cell
    nested too deeply or with a key given twice is refused rather than read as text."""
    if not text.lstrip().startswith(("[", "{")):
        try:
            return json.loads(text, parse_constant=_no_constant)
        except ValueError:
            return text
    try:
        return parse_json(text)
    except json.JSONDecodeError:
        return text
    except ValueError as err:
        raise SpecError.one(where, column, f"not a usable value: {err}") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _text(path: Path) -> str:
    """The file's text: a regular file of at most :data:`MAX_RUNS_BYTES`, UTF-8 (a BOM allowed); an
    undecodable byte is reported with its line and column."""
    data = read_bytes(path, MAX_RUNS_BYTES, what="runs", limit_env="SIMTRAIN_MAX_RUNS_BYTES")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError.one(f"{path}:{line}", "(line)", f"not UTF-8 text: undecodable byte "
                            f"0x{data[err.start]:02x} at column {column}") from None


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for i, line in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028 may sit in a string
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            obj = parse_json(line)
        except json.JSONDecodeError as err:
            raise SpecError.one(where, "(line)", f"not valid JSON: {err.msg} (column {err.colno})") from None
        except ValueError as err:  # too deep, a key twice, NaN / Infinity
            raise SpecError.one(where, "(line)", f"not valid JSON: {err}") from None
        if not isinstance(obj, dict):
            raise SpecError.one(where, "(line)", "each line must be a JSON object")
        out.append((i, {k: v for k, v in obj.items() if v is not None}))
    return out


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a CSV file with a header: a column named twice, an empty column name, or a row with
    more or fewer cells than the header is refused with its line."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    out = []
    first = 1  # the line a record starts on (a quoted cell may span lines)
    try:
        for cells in reader:
            line, first = first, reader.line_num + 1
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue  # a blank line
            where = f"{path}:{line}"
            if header is None:
                header = [c.strip() for c in cells]
                seen: dict[str, int] = {}
                for n, name in enumerate(header, start=1):
                    if not name:
                        raise SpecError.one(where, f"(column {n})", "empty column name in the header")
                    if name in seen:
                        raise SpecError.one(where, name, f"column given twice (columns {seen[name]} and {n})")
                    seen[name] = n
                continue
            if len(cells) != len(header):
                raise SpecError.one(where, "(row)", f"{len(cells)} cells, but the header has {len(header)} "
                                    "columns")
            out.append((line, {k: _cell(v, where, k) for k, v in zip(header, cells, strict=True) if v != ""}))
    except csv.Error as err:
        raise SpecError.one(f"{path}:{reader.line_num}", "(line)", f"not valid CSV: {err}") from None
    return out


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) pairs; CSV cells parsed by :func:`_cell`, empty cells dropped."""
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".ndjson", ".csv"):
        raise SpecError.one(str(path), "(file)", "runs file must end in .csv or .jsonl")
    text = _text(path)
    return _jsonl_rows(path, text) if suffix != ".csv" else _csv_rows(path, text)


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
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise SpecError.one(None, "path", f"must be a runs file path (str or pathlib.Path), got {type(path).__name__}")
    path = Path(path)
    records = [record_from_row(row, f"{path}:{line}") for line, row in _rows(path)]
    if not records:
        raise SpecError.one(str(path), "(file)", "no runs in the file")
    return records
