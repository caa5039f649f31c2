"""Sweep rows as Arrow tables, and the output file that a sweep streams into and resumes from.

Rows stream into ``<out>.parts/part-NNNNNN.parquet`` as they finish, each part written to a temporary
name and renamed (atomic on POSIX), so a SIGINT, a crash or a SIGKILL leaves only whole parts behind.
When the sweep ends the rows — in grid order — are written to ``out`` (Parquet, or CSV for a ``.csv``
path) the same way, and the parts are removed. A later sweep with the same model, cluster, base
config and engine reads ``out`` and any parts, keeps the last row of each ``point_key`` and evaluates
only the points not yet there (rows with ``status="error"`` are retried). Every Parquet file carries
the sweep's fingerprint in its metadata; resuming into a file of a different sweep is an error.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from simtrain.errors import SimtrainError, SpecError
from simtrain.search.sweep_rows import RESULT_COLUMNS

__all__ = ["sweep_schema", "to_table", "SweepStore"]

_META_KEY = b"simtrain.sweep"
_TEXT_RESULTS = ("status", "bottleneck", "reasons", "warnings")
_BOOL_RESULTS = ("feasible", "memory_fits")


def _input_type(values: list):
    """One Arrow type per grid key: bool, int64, float64 or string; a key whose values mix kinds
    (``tp: [1, "x"]``) is stored as text, since a Parquet column has one type."""
    import pyarrow as pa
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if any(isinstance(v, bool) for v in present):
        return pa.string()
    if present and all(isinstance(v, int) for v in present):
        return pa.int64()
    if present and all(isinstance(v, (int, float)) for v in present):
        return pa.float64()
    return pa.string()


def sweep_schema(grid: dict[str, list], fingerprint: str):
    """The Arrow schema of a sweep's rows: grid keys (sorted), results, then ``point_key``."""
    import pyarrow as pa
    fields = [pa.field(k, _input_type(grid[k])) for k in sorted(grid)]
    for name in RESULT_COLUMNS:
        typ = (pa.string() if name in _TEXT_RESULTS else pa.bool_() if name in _BOOL_RESULTS
               else pa.int64() if name == "devices_count" else pa.float64())
        fields.append(pa.field(name, typ))
    fields.append(pa.field("point_key", pa.string()))
    meta = {_META_KEY: json.dumps({"fingerprint": fingerprint, "version": 1}).encode()}
    return pa.schema(fields, metadata=meta)


def _cell(value, typ):
    import pyarrow as pa
    if value is None:
        return None
    if pa.types.is_string(typ):
        return str(value)
    return float(value) if pa.types.is_floating(typ) else value


def to_table(rows: list[dict], schema):
    """Rows (dicts) as a table of ``schema``: input values of a text column become ``str(value)``."""
    import pyarrow as pa
    columns = {f.name: [_cell(r.get(f.name), f.type) for r in rows] for f in schema}
    return pa.table({n: pa.array(v, type=schema.field(n).type) for n, v in columns.items()}, schema=schema)


class SweepStore:
    """The output of one sweep (see module docstring)."""

    def __init__(self, out: str | os.PathLike, schema, resume: bool = True) -> None:
        from simtrain.outputs import TABLE_SUFFIXES, check_output_path
        # a directory, an unwritable place or another suffix is refused before any point runs
        self.path = check_output_path(out, "out", TABLE_SUFFIXES)
        self.format = self.path.suffix.lower().lstrip(".")
        self.schema = schema
        self.parts = self.path.with_name(self.path.name + ".parts")
        if self.parts.exists() and not self.parts.is_dir():
            raise SpecError.one(str(self.parts), "out", "is in the way: the sweep keeps its unfinished rows "
                                "in this folder beside out, and a file of that name is there")
        try:
            if not resume:
                self.path.unlink(missing_ok=True)
                shutil.rmtree(self.parts, ignore_errors=True)
            self.parts.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SimtrainError(f"out: {self.path}: cannot write here: {err}") from err
        for tmp in self.parts.glob("*.tmp"):  # a write cut short; its rows are recomputed
            tmp.unlink(missing_ok=True)
        numbers = [int(p.stem.split("-")[1]) for p in self.parts.glob("part-*.parquet")]
        self._next = max(numbers, default=-1) + 1

    # --- reading what an earlier run left ---------------------------------------------------------
    def _check_fingerprint(self, file: Path, schema) -> None:
        meta = json.loads((schema.metadata or {}).get(_META_KEY, b"{}"))
        mine = json.loads(self.schema.metadata[_META_KEY])
        if meta.get("fingerprint") != mine["fingerprint"]:
            raise SpecError.one(str(file), "out", "holds rows of a different sweep (model, cluster, base config "
                                "or engine differ); pass resume=False to overwrite it, or choose another path")

    def _read(self, file: Path):
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq
        try:
            if file.suffix.lower() == ".csv":
                types = {f.name: f.type for f in self.schema}
                opts = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False)
                table = pcsv.read_csv(file, convert_options=opts)
            else:
                table = pq.read_table(file)
                self._check_fingerprint(file, table.schema)
            return table.select(self.schema.names).cast(self.schema)
        except SpecError:
            raise
        except Exception as err:  # noqa: BLE001 — any unreadable file is reported the same way
            raise SpecError.one(str(file), "out", f"cannot resume from it ({type(err).__name__}: {err}); "
                                "pass resume=False to overwrite it") from err

    def load(self, wanted: set[str]):
        """Rows already stored whose key is in ``wanted`` (the last of each key), as one table."""
        import pyarrow as pa
        files = ([self.path] if self.path.exists() else []) + sorted(self.parts.glob("part-*.parquet"))
        tables = [self._read(f) for f in files]
        if not tables:
            return self.schema.empty_table()
        table = pa.concat_tables(tables)
        last: dict[str, int] = {}
        for i, key in enumerate(table.column("point_key").to_pylist()):
            if key in wanted:
                last[key] = i
        return table.take(sorted(last.values()))

    # --- writing -----------------------------------------------------------------------------------
    def _write(self, table, target: Path, fmt: str) -> None:
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq
        tmp = target.with_name(target.name + ".tmp")
        try:
            if fmt == "csv":
                pcsv.write_csv(table, tmp, pcsv.WriteOptions(quoting_style="needed"))
            else:
                pq.write_table(table, tmp)
            os.replace(tmp, target)  # whole file or nothing: an interrupted write leaves only the .tmp
        except OSError as err:
            raise SimtrainError(f"out: {target}: cannot write: {err}") from err

    def write_part(self, table) -> None:
        """Append finished rows as the next part file."""
        if table.num_rows:
            self._write(table, self.parts / f"part-{self._next:06d}.parquet", "parquet")
            self._next += 1

    def finish(self, table) -> None:
        """Write every row of the sweep to ``out`` and drop the parts."""
        self._write(table, self.path, self.format)
        shutil.rmtree(self.parts, ignore_errors=True)
