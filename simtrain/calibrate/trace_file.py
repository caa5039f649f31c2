"""Reading a ``torch.profiler`` Chrome trace file as untrusted input (calibrate/trace.py parses it).

A regular, size-capped file (``limit`` bytes, after decompression when the name ends in ``.gz``); a
broken gzip stream, non-UTF-8 text or broken JSON raises :class:`~simtrain.errors.SpecError` naming the
file, never echoing its contents.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from simtrain.errors import SpecError

__all__ = ["load_trace_document"]


def load_trace_document(path: Path, limit: int):
    """The trace document: a regular, size-capped file, gzip when it ends in .gz."""
    from simtrain.specs.reading import read_bytes, read_json_file
    if path.suffix != ".gz":
        return read_json_file(path, limit, what="profiler trace")
    raw = read_bytes(path, limit, what="profiler trace")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            data = f.read(limit + 1)
    except (OSError, EOFError) as err:
        raise SpecError.one(str(path), "", f"not a gzip file ({type(err).__name__})") from None
    if len(data) > limit:
        raise SpecError.one(str(path), "", f"larger than {limit} bytes decompressed: too big for a profiler trace")
    from simtrain.specs.reading import parse_json
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError.one(str(path), "", f"not UTF-8 text once decompressed (undecodable byte at offset "
                            f"{err.start}): not a profiler trace") from None
    try:  # the checks of an uncompressed trace: nesting, keys given twice, NaN / Infinity
        return parse_json(text)
    except json.JSONDecodeError as err:
        raise SpecError.one(str(path), "", f"broken JSON (line {err.lineno}, column {err.colno}): {err.msg}") \
            from None
    except ValueError as err:
        raise SpecError.one(str(path), "", f"broken JSON: {err}") from None
