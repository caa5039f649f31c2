"""Reading untrusted input files: spec YAML, Hugging Face JSON, calibration and measurement files.

Every file a user names is treated as hostile until it has parsed and validated:

- only regular files are opened (checked with ``os.stat`` before opening, and again with ``fstat`` on
  the open descriptor, which is opened ``O_NONBLOCK``): a FIFO, a socket, a directory or a device
  such as ``/dev/zero`` is refused without blocking;
- files are capped in size: :data:`MAX_SPEC_BYTES` (1 MiB; ``SIMTRAIN_MAX_SPEC_BYTES`` in the
  environment raises or lowers it) for spec, model, job and Hugging Face config files; callers pass a
  larger ``limit`` for measurement files;
- YAML goes through libyaml's C loader (``yaml.CSafeLoader``; the pure-Python ``SafeLoader`` where
  PyYAML was built without it). Before anything is built, one pass over the parser's events bounds
  the nesting depth (:data:`MAX_YAML_DEPTH`) and the node count after alias expansion
  (:data:`MAX_YAML_NODES`), so an alias bomb ("billion laughs") fails in milliseconds, and refuses
  recursive aliases. A key given twice in one mapping is an error naming the key and both lines;
- JSON: the same size cap, duplicate keys and ``NaN`` / ``Infinity`` refused, nesting bounded.

Errors are :class:`~simtrain.errors.SpecError` s naming the file (and the line where the parser
gives one). They never quote the file's content beyond :func:`clip` (a ``repr`` of at most
:data:`CLIP_CHARS` characters) and quote nothing at all from a file that failed to parse.
"""

from __future__ import annotations

import json
import os
import re
import reprlib
import stat
from pathlib import Path
from typing import Any

import yaml

from simtrain.errors import QUOTE_CHARS, SpecError, clip_quoted

__all__ = ["MAX_SPEC_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "CLIP_CHARS", "clip", "clip_quoted", "read_text",
           "parse_yaml", "read_yaml_file", "read_json_file", "parse_json", "env_bytes"]


def env_bytes(name: str, default: int) -> int:
    """A byte limit from the environment variable ``name`` (a positive integer), else ``default``."""
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


#: the largest spec / model / job / config file read, in bytes (env ``SIMTRAIN_MAX_SPEC_BYTES``)
MAX_SPEC_BYTES = env_bytes("SIMTRAIN_MAX_SPEC_BYTES", 1 << 20)
#: deepest nesting of YAML / JSON collections (the library's files use fewer than 10 levels)
MAX_YAML_DEPTH = 64
#: most YAML nodes in one document, counting every alias as the nodes it stands for
MAX_YAML_NODES = 200_000
#: the most characters of an offending value an error message quotes
CLIP_CHARS = QUOTE_CHARS

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = CLIP_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def clip(value: Any) -> str:
    """A short ``repr`` of ``value`` for an error message (at most about :data:`CLIP_CHARS` characters)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= CLIP_CHARS else repr(value[:CLIP_CHARS - 3]) + "…"
    text = _REPR.repr(value)
    return text if len(text) <= CLIP_CHARS + 8 else text[:CLIP_CHARS] + "…"


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> str:
    kind = next((what for test, what in _KINDS if test(mode)), "not a plain file")
    return f"not a regular file ({kind}): refused"


_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def _oserror(name: str, err: OSError | ValueError) -> SpecError:
    name = name.replace("\x00", "\\x00")
    if isinstance(err, FileNotFoundError):
        return SpecError.one(name, "", "file not found")
    reason = getattr(err, "strerror", None) or type(err).__name__
    return SpecError.one(name, "", f"cannot read file: {reason}")


def read_bytes(path: str | os.PathLike, limit: int | None = None, what: str = "spec", *,
               limit_env: str = "SIMTRAIN_MAX_SPEC_BYTES") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default :data:`MAX_SPEC_BYTES`);
    ``limit_env`` is the environment variable that sets the limit, named by the error above it."""
    name, limit = os.fspath(path), limit or MAX_SPEC_BYTES
    try:
        mode = os.stat(name).st_mode
    except (OSError, ValueError) as err:  # missing, permission, NUL byte, name too long, loop, ...
        raise _oserror(name, err) from None
    if not stat.S_ISREG(mode):
        raise SpecError.one(name, "", _not_regular(mode))
    try:
        fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS)
    except OSError as err:
        raise _oserror(name, err) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between stat and open
            raise SpecError.one(name, "", _not_regular(st.st_mode))
        chunks, total = [], 0
        while total <= limit:
            data = os.read(fd, min(1 << 16, limit + 1 - total))
            if not data:
                break
            chunks.append(data)
            total += len(data)
    except OSError as err:
        raise _oserror(name, err) from None
    finally:
        os.close(fd)
    if total > limit:
        raise SpecError.one(name, "", f"larger than {limit} bytes: too big for a {what} file "
                            f"(the limit is {limit_env})")
    return b"".join(chunks)


def read_text(path: str | os.PathLike, limit: int | None = None, what: str = "spec") -> str:
    """:func:`read_bytes` decoded as UTF-8; a binary file is refused without quoting it."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError.one(os.fspath(path), "", f"not a UTF-8 text file (undecodable byte at offset {err.start}): "
                            f"not a {what} file") from None


# ---------------------------------------------------------------------------------------------- YAML
class _SafeLoader(_Loader):
    """The C (or pure-Python) safe loader, with duplicate mapping keys made an error."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key, line = self.construct_object(key_node), key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor reports it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {clip(key)} on line {line} (first given on line {first})",
                        key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep)


_STARTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_ENDS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _bounds_error(reason: str, event) -> yaml.YAMLError:
    return yaml.MarkedYAMLError(problem=reason, problem_mark=event.start_mark)


def _check_bounds(text: str) -> None:
    """One pass over the parser's events: nesting depth, nodes after alias expansion, recursive aliases."""
    counts, anchors = [0], [None]      # per open collection: nodes inside so far, its anchor
    sizes: dict[str, int] = {}          # anchor -> expanded size of the node it names
    total = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, _STARTS):
            counts.append(0)
            anchors.append(event.anchor)
            if len(counts) - 1 > MAX_YAML_DEPTH:
                raise _bounds_error(f"nested more than {MAX_YAML_DEPTH} levels deep", event)
            continue
        if isinstance(event, _ENDS):
            size, anchor = counts.pop() + 1, anchors.pop()
            if anchor is not None:
                sizes[anchor] = size
            counts[-1] += size
            total += 1
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                sizes[event.anchor] = 1
            counts[-1] += 1
            total += 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in anchors:
                raise _bounds_error("an alias refers to a collection that contains it (recursive alias)", event)
            size = sizes.get(event.anchor, 1)
            counts[-1] += size
            total += size
        else:
            continue
        if total > MAX_YAML_NODES:
            raise _bounds_error(f"more than {MAX_YAML_NODES} values once aliases are expanded "
                                "(an alias bomb, or far too big for a spec)", event)


_PATH_CHARS = 400  # field paths longer than this get no line of their own (their ancestor's is used)


def _line_map(node) -> dict[str, int]:
    """Dotted field path (as :func:`simtrain.specs.base._loc` writes it) → 1-based line of its node.
    Each node is visited once (an alias is not walked again) and long paths are not recorded, so the
    map stays as small as the file."""
    lines: dict[str, int] = {}
    seen: set[int] = set()
    todo = [("", node)]
    while todo:
        path, n = todo.pop()
        if id(n) in seen or len(path) > _PATH_CHARS:
            continue
        seen.add(id(n))
        lines.setdefault(path, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    key = f"{path}.{k.value}" if path else str(k.value)
                    if len(key) <= _PATH_CHARS:
                        lines.setdefault(key, k.start_mark.line + 1)
                        todo.append((key, v))
        elif isinstance(n, yaml.SequenceNode):
            todo.extend((f"{path}[{i}]", v) for i, v in enumerate(n.value))
    return lines


_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def _redact(problem: str) -> str:
    """A YAML parser message without the file's text: quoted parts longer than a token become '…'."""
    def keep(m: re.Match) -> str:
        inner = m.group(0)[1:-1]
        return m.group(0) if len(inner) <= 2 or re.fullmatch(r"<[a-z ]+>", inner) else "'…'"
    return _QUOTED.sub(keep, problem)[:200]


def _yaml_error(name: str, err: yaml.YAMLError) -> SpecError:
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "not YAML"
    if isinstance(err, yaml.reader.ReaderError):
        where = f" (character {err.position})"
    if problem.startswith("duplicate key"):
        return SpecError.one(name, "", problem)
    return SpecError.one(name, "", f"broken YAML{where}: {_redact(problem)}")


def parse_yaml(text: str, name: str) -> tuple[Any, dict[str, int]]:
    """(document, line map) of one YAML document; every failure is a :class:`SpecError` on ``name``."""
    try:
        _check_bounds(text)
        loader = _SafeLoader(text)
        try:
            node = loader.get_single_node()
            lines = {} if node is None else _line_map(node)  # before merge keys (<<) are flattened
            doc = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise _yaml_error(name, err) from None
    except RecursionError:
        raise SpecError.one(name, "", "broken YAML: nested too deeply") from None
    except (ValueError, OverflowError, TypeError) as err:  # int too long, impossible date, ...
        raise SpecError.one(name, "", f"broken YAML: a value cannot be read ({type(err).__name__})") from None
    return doc, lines


def read_yaml_file(path: str | os.PathLike, limit: int | None = None, what: str = "spec") -> tuple[Any, dict]:
    """(document, line map) of a YAML file, read with every check above."""
    return parse_yaml(read_text(path, limit, what), os.fspath(path))


# ---------------------------------------------------------------------------------------------- JSON
def _json_pairs(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {clip(key)}")
        out[key] = value
    return out


def _json_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _json_depth(text: str) -> int:
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = m.group(0)
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def read_json_file(path: str | os.PathLike, limit: int | None = None, what: str = "JSON") -> Any:
    """A JSON document from a regular, size-capped file; duplicate keys and NaN / Infinity refused."""
    name = os.fspath(Path(path))
    text = read_text(path, limit, what)
    if _json_depth(text) > MAX_YAML_DEPTH:
        raise SpecError.one(name, "", f"broken JSON: nested more than {MAX_YAML_DEPTH} levels deep")
    try:
        return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
    except json.JSONDecodeError as err:
        raise SpecError.one(name, "", f"broken JSON (line {err.lineno}, column {err.colno}): {err.msg}") from None
    except RecursionError:
        raise SpecError.one(name, "", "broken JSON: nested too deeply") from None
    except ValueError as err:  # duplicate key, NaN, an integer too long
        reason = str(err) if str(err).startswith(("duplicate key", "NaN", "Infinity", "-Infinity")) \
            else f"a value cannot be read ({type(err).__name__})"
        raise SpecError.one(name, "", f"broken JSON: {reason}") from None


def parse_json(text: str) -> Any:
    """One JSON document from untrusted ``text``, with the checks of :func:`read_json_file`: nesting
    deeper than :data:`MAX_YAML_DEPTH`, a key given twice and ``NaN`` / ``Infinity`` refused. Raises
    ``ValueError`` saying what (a :class:`json.JSONDecodeError`, with its line and column, for broken
    JSON); never ``RecursionError``."""
    if _json_depth(text) > MAX_YAML_DEPTH:
        raise ValueError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    try:
        return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
