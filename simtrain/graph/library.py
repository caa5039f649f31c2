"""The model library: ``load_model("llama3-8b")`` → a :class:`~simtrain.graph.model.Model`.

Names resolve to ``workloads/models/NAME.yaml`` (a value ending in ``.yaml`` or holding a path
separator is a path). Models are cached by (path, file mtime, seq_len): an estimate that asks for the
same model again gets the same object without re-reading or re-building anything, and an edited
file is picked up.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from simtrain.errors import SpecError
from simtrain.graph.model import Model, build_model
from simtrain.graph.spec import ModelSpec
from simtrain.specs.library import library_names, library_path, read_spec_document, validate_document

__all__ = ["load_model", "load_model_spec", "model_names"]


@functools.lru_cache(maxsize=256)
def _spec_cached(path: str, mtime_ns: int) -> ModelSpec:
    _, body = read_spec_document(Path(path), expected="model")
    return validate_document("model", body, path)


def load_model_spec(name_or_path: str | os.PathLike) -> ModelSpec:
    """The validated :class:`ModelSpec` of a library name or path."""
    path = library_path("model", name_or_path)
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise SpecError.one(str(path), "", "file not found") from None
    return _spec_cached(str(path), mtime)


@functools.lru_cache(maxsize=256)
def _model_cached(path: str, mtime_ns: int, seq_len: int | None) -> Model:
    spec = _spec_cached(path, mtime_ns)
    if seq_len is not None and seq_len != spec.seq_len:
        if not spec.is_sequence_model:
            raise SpecError.one(path, "seq_len", f"{spec.family} model {spec.name!r} has no sequence length")
        spec = spec.with_seq_len(seq_len)
    return build_model(spec)


def load_model(name_or_path: str | os.PathLike, seq_len: int | None = None) -> Model:
    """A model of the library by name (``"gpt3-175b"``) or a model YAML path; ``seq_len`` rebuilds
    a sequence model at another length (None: the file's)."""
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
        raise SpecError.one(None, "seq_len", f"must be a positive integer, got {seq_len!r}")
    path = library_path("model", name_or_path)
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise SpecError.one(str(path), "", "file not found") from None
    return _model_cached(str(path), mtime, seq_len)


def model_names() -> list[str]:
    """Names of the models in ``workloads/models``."""
    return library_names("model")
