"""st.sweep: evaluate a grid of what-ifs; one DataFrame row per point, infeasible rows kept with reasons.

Grid keys are TrainConfig fields (``tp``, ``micro_batch_size``, ``zero_stage``, ...) plus ``nodes``
(the cluster's node count); an unknown key is a :class:`SpecError` before anything runs. A point that
is bad input (a config that does not validate, ``nodes=2.5``), that raises, or that does not fit
becomes a row with ``feasible=False``, a ``status`` and the reason — the sweep keeps going (rows:
sweep_rows.py). With a Dask ``client`` chunks of points run on its workers (sweep_dask.py); without
one, in this process. With ``out`` the rows stream to a Parquet (or CSV) file as they finish and a
rerun resumes from it (sweep_store.py). Rows come back in grid order whatever the completion order,
so an interrupted-and-resumed sweep equals an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator

import numpy as np

from simtrain.errors import SpecError
from simtrain.search.sweep_rows import (
    RESULT_COLUMNS,
    check_grid,
    evaluate_chunk,
    evaluate_point,
    grid_points,
    point_key,
)

__all__ = ["sweep", "grid_points", "evaluate_point", "point_key", "RESULT_COLUMNS", "ENGINES"]

ENGINES = ("auto", "estimate", "simulate")
"""``auto`` (the default): the vectorized estimate for every point it costs exactly, ``st.estimate``
for the rest — the rows ``estimate`` gives, faster (search/vector_rows.py)."""
#: points per chunk of the ``auto`` engine: a progress update and a flush at least this often
AUTO_CHUNK = 131_072
#: rows are written to ``out`` at least this often (a crash loses at most this much work)
FLUSH_INTERVAL_S = 1.0
#: the progress bar appears only once a sweep has run this long (issue 14: "longer than ~2 s")
PROGRESS_DELAY_S = 2.0


def _fingerprint(model, cluster, cfg, engine: str) -> str:
    """What a stored row depends on besides its point: resume refuses a file of another sweep."""
    facts = {"model": [model.name, model.param_count, len(model.ops), getattr(model, "seq_len", None),
                       model.flops_per_sample()],
             "cluster": cluster.model_dump(mode="json"), "cfg": cfg.model_dump(mode="json"),
             "engine": "estimate" if engine == "auto" else engine}  # auto's rows are estimate's rows
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _chunks(points: list[dict], size: int) -> list[list[dict]]:
    return [points[i:i + size] for i in range(0, len(points), size)]


def _auto_chunk(n_points: int, threads: int, engine: str = "estimate") -> int:
    # ~4 chunks per worker thread keeps the load balanced; 500 points (~1 s of estimates) bounds
    # a chunk's latency and what a killed worker has to redo; 1 point per task is the old slow path.
    # The auto engine costs ~50k points a second, and pays its per-chunk setup once per chunk
    cap = 20_000 if engine == "auto" else 500
    return max(1, min(cap, -(-n_points // (4 * threads))))


def _local(model, cluster, cfg, engine: str, chunks: list[list[dict]]) -> Iterator[list[dict]]:
    for chunk in chunks:
        yield evaluate_chunk(model, cluster, cfg, chunk, engine)


def _runs(client, inputs: tuple, todo: list[dict], chunk_size: int | None) -> Iterator[list[dict]]:
    """The rows of ``todo``, chunk by chunk: in this process, or on the client's Dask workers."""
    if client is None:
        return _local(*inputs, _chunks(todo, chunk_size or 32))
    from simtrain.search.sweep_dask import dask_threads, run_on_dask
    size = chunk_size or _auto_chunk(len(todo), dask_threads(client), inputs[3])
    return run_on_dask(client, *inputs, _chunks(todo, size))


def _auto_local(model, cluster, cfg, coded: tuple, todo, schema, chunk_size: int | None, point_key: list) -> Iterator:
    """The auto engine in this process: Arrow tables of ``chunk_size`` points (default
    :data:`AUTO_CHUNK`), the chunks sharing what the vectorized estimate caches."""
    from simtrain.search.vector_rows import auto_table, point_at
    keys, uniques, codes = coded
    size, cache = chunk_size or AUTO_CHUNK, {}
    # the vectorized engine keys its caches by value: a list value (recompute_modules) goes point by point
    scalar = not all(isinstance(v, (bool, int, float, str, type(None))) for vs in uniques.values() for v in vs)
    for start in range(0, len(todo), size):
        part = np.asarray(todo[start:start + size])
        if scalar:
            yield evaluate_chunk(model, cluster, cfg, [point_at(keys, uniques, codes, i) for i in part],
                                 "estimate")
            continue
        try:
            yield auto_table(model, cluster, cfg, keys, uniques, {k: codes[k][part] for k in keys}, schema, cache,
                             [point_key[i] for i in part])
        except Exception as err:  # noqa: BLE001 — the chunk's points one by one, each failure its own row
            warnings.warn(f"sweep: the vectorized engine failed on {len(part)} points ({type(err).__name__}: "
                          f"{err}); they are evaluated one by one", RuntimeWarning, stacklevel=2)
            cache.clear()
            yield evaluate_chunk(model, cluster, cfg, [point_at(keys, uniques, codes, i) for i in part],
                                 "estimate")


def progress_bar(total: int, initial: int, progress: bool | None, desc: str = "sweep"):
    """A tqdm bar on stderr: ``progress`` None shows it on a terminal once the run passes
    :data:`PROGRESS_DELAY_S`; True shows it from the start whatever the duration; False never."""
    from tqdm.auto import tqdm
    enabled = sys.stderr.isatty() if progress is None else bool(progress)
    return tqdm(total=total, initial=initial, disable=not enabled, delay=PROGRESS_DELAY_S if progress is None else 0.0,
                unit="pt", desc=desc, file=sys.stderr, dynamic_ncols=True)


class _Sink:
    """Collects finished rows; writes them to the store at most every FLUSH_INTERVAL_S and, on the
    way out (also on KeyboardInterrupt or any error), whatever is still buffered."""

    def __init__(self, store, schema) -> None:
        self.store, self.schema, self.buffer, self.tables = store, schema, [], []
        self.last_flush = time.monotonic()

    def add(self, rows) -> None:
        """Rows as dicts, or an Arrow table of the schema (the auto engine's chunks)."""
        if isinstance(rows, list):
            self.buffer.extend(rows)
        else:
            self.flush()
            self.tables.append(rows)
            if self.store is not None:
                self.store.write_part(rows)
        if time.monotonic() - self.last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        from simtrain.search.sweep_store import to_table
        if self.buffer:
            table = to_table(self.buffer, self.schema)
            self.buffer = []
            self.tables.append(table)
            if self.store is not None:
                self.store.write_part(table)
        self.last_flush = time.monotonic()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.flush()


def _in_grid_order(tables, schema, keys: list[str]):
    import pyarrow as pa
    table = pa.concat_tables([schema.empty_table(), *tables])
    where = {k: i for i, k in enumerate(table.column("point_key").to_pylist())}
    return table.take([where[k] for k in keys])


def _inputs(model, cluster, cfg, engine: str):
    from simtrain.inputs import as_cluster, as_config, as_model
    if engine not in ENGINES:
        raise SpecError.one(None, "engine", f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    return as_model(model), as_cluster(cluster), as_config(cfg)


#: grid axes that change how many devices the other axes leave to data parallelism
_DEVICE_AXES = frozenset({"tp", "pp", "cp", "nodes"})


def _free_dp(cfg, grid: dict):
    """The base config without its ``dp`` when the grid varies tp / pp / cp / nodes and not dp: a job
    file's pinned dp (``dp: 16`` for 8 × 8 on 1,024 devices) would make every other point "does not
    match the cluster's devices"; dp is then worked out per point, as for a config that never set it."""
    if cfg.dp is None or "dp" in grid or not (_DEVICE_AXES & set(grid)):
        return cfg
    from simtrain.specs.train import TrainConfig
    return TrainConfig.build(None, **{k: v for k, v in cfg.model_dump(exclude_unset=True).items() if k != "dp"})


def sweep(model, cluster, cfg, grid: dict[str, list], engine: str = "auto", client=None, out=None,
          resume: bool = True, progress: bool | None = None, chunk_size: int | None = None):
    """pandas DataFrame, one row per grid point in grid order (see module docstring).

    ``model`` / ``cluster`` / ``cfg`` may be library names or paths (as for ``st.estimate``); a ``dp``
    set in ``cfg`` is dropped (worked out per point) when the grid varies tp, pp, cp or nodes but not dp;
    ``engine``: ``auto`` (the default: the rows of ``estimate``, vectorized where it can be),
    ``estimate`` (``st.estimate`` per point) or ``simulate``; ``client`` a ``distributed.Client``;
    ``out`` a ``.parquet`` or ``.csv`` path that rows stream to and that a rerun resumes from
    (``resume=False`` starts afresh; ``auto`` and ``estimate`` resume each other's files); ``progress``
    None shows a tqdm bar when stderr is a terminal and the sweep runs over 2 s, True shows it however
    short the sweep, False never; ``chunk_size`` is the points per Dask task (default: ~4 chunks per
    worker thread, at most 500 — 20,000 for ``auto``) or, for ``auto`` in this process, per chunk."""
    import pyarrow as pa

    from simtrain.search.sweep_store import SweepStore, sweep_schema
    from simtrain.search.vector_rows import grid_codes, point_at, point_keys
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise SpecError.one(None, "out", f"must be a path to a .parquet or .csv file, got {type(out).__name__}")
    grid = check_grid(grid)
    model, cluster, cfg = _inputs(model, cluster, cfg, engine)
    cfg = _free_dp(cfg, grid)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise SpecError.one(None, "chunk_size", f"must be a whole number >= 1, got {chunk_size!r}")
    coded = grid_codes(grid)
    names, uniques, codes = coded
    keys = point_keys(names, uniques)  # the whole grid, in sweep order
    schema = sweep_schema(grid, _fingerprint(model, cluster, cfg, engine))
    store = SweepStore(out, schema, resume) if out is not None else None
    stored = store.load(set(keys)) if store is not None else schema.empty_table()
    done = {k for k, s in zip(stored.column("point_key").to_pylist(), stored.column("status").to_pylist(),
                              strict=True) if s != "error"}
    todo = [i for i, k in enumerate(keys) if k not in done] if done else range(len(keys))
    if engine == "auto" and client is None:
        runs = _auto_local(model, cluster, cfg, coded, todo, schema, chunk_size, keys)
    else:
        points = [point_at(names, uniques, codes, i) for i in todo]
        runs = _runs(client, (model, cluster, cfg, engine), points, chunk_size)
    with progress_bar(len(keys), len(keys) - len(todo), progress) as bar, _Sink(store, schema) as sink, \
            contextlib.closing(runs):  # on Ctrl-C: cancel the Dask tasks in flight, write what finished
        sink.tables.append(stored)
        for rows in runs:
            sink.add(rows)
            bar.update(len(rows))
    # the auto engine's chunks come in grid order: only a resumed or distributed sweep needs sorting
    ordered = engine == "auto" and client is None and not stored.num_rows
    table = pa.concat_tables([schema.empty_table(), *sink.tables]) if ordered else \
        _in_grid_order(sink.tables, schema, keys)
    if store is not None:
        store.finish(table)
    return table.to_pandas()
