"""Output paths checked before any work starts: one helper for every verb and API function that writes.

:func:`check_output_path` is called at the entry of each writer (``--out``, ``--csv``, ``--plot``,
``--trace``, ``--gantt``, ``--residuals``, ``st.sweep(out=)``, a figure's ``path=``, ...), before a
model is costed or a sweep runs, so a path that cannot be written fails in milliseconds with a
:class:`~simtrain.errors.SpecError` naming the flag or argument, not after minutes of work or with a
traceback. What it checks:

- the path is a string or ``os.PathLike``, not empty, without NUL bytes, not too long for the system;
- the suffix is one the writer supports (case-insensitive) — a writer never appends one of its own,
  so nothing is ever written *beside* the path asked for (matplotlib would write ``DIR.png`` for a
  suffix-less ``DIR``);
- a file is not asked for where a directory (or a FIFO, socket or device) is, nor at a broken symbolic
  link; a folder (``folder=True``) is not asked for where a file is;
- the folder that will hold it exists or is created here, on purpose (as every ``--out`` always did),
  and a file can be created in it: the check creates and removes a probe file, and when it fails the
  folders it made are removed again, so a refused path leaves nothing behind;
- an existing file is writable (opened for appending, nothing written).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from simtrain.errors import SpecError

__all__ = ["check_output_path", "IMAGE_SUFFIXES", "CSV_SUFFIXES", "JSON_SUFFIXES", "YAML_SUFFIXES",
           "TABLE_SUFFIXES"]

#: figure formats every matplotlib install writes (Agg, PDF, SVG, PS backends; JPEG / TIFF by Pillow)
IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".tif", ".tiff", ".eps", ".ps")
CSV_SUFFIXES = (".csv",)
JSON_SUFFIXES = (".json",)
YAML_SUFFIXES = (".yaml", ".yml")
#: a sweep's rows
TABLE_SUFFIXES = (".parquet", ".csv")

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _shown(path: str) -> str:
    text = path.replace("\x00", "\\x00")
    return text if len(text) <= 200 else text[:100] + "…" + text[-60:]


def _fail(path: str | None, arg: str, reason: str) -> SpecError:
    return SpecError.one(None if path is None else _shown(path), arg, reason)


def _reason(err: OSError | ValueError) -> str:
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


def _lstat(path: str, arg: str) -> os.stat_result | None:
    """``os.lstat`` of ``path``; None when nothing is there; a SpecError when the name cannot be used."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # name too long, NUL byte, a file used as a folder, a loop
        if isinstance(err, NotADirectoryError):
            raise _fail(path, arg, "cannot write: a part of its folder path is a file, not a folder") \
                from None
        raise _fail(path, arg, f"cannot write: {_reason(err)}") from None


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a plain file")


def _make_folder(folder: Path, path: str, arg: str) -> list[Path]:
    """Create ``folder`` and its missing parents; the folders made, deepest first."""
    made: list[Path] = []
    probe = folder
    while True:
        st = _lstat(os.fspath(probe), arg)
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                try:
                    st = os.stat(probe)
                except OSError:
                    raise _fail(path, arg, f"cannot write: its folder {_shown(str(probe))} is a broken "
                                "symbolic link") from None
            if not stat.S_ISDIR(st.st_mode):
                raise _fail(path, arg, f"cannot write: {_shown(str(probe))} is {_kind(st.st_mode)}, "
                            "not a folder")
            break
        made.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for d in reversed(made):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            _remove(made)
            raise _fail(path, arg, f"cannot make its folder {_shown(str(d))}: {_reason(err)}") from None
    return made


def _remove(folders: list[Path]) -> None:
    for d in folders:  # deepest first
        try:
            d.rmdir()
        except OSError:
            pass


def _probe(folder: Path, path: str, arg: str, made: list[Path]) -> None:
    """Create and remove a file in ``folder``: the one sure test of writing there (root, read-only mounts)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".simtrain-probe-", dir=folder)
    except OSError as err:
        _remove(made)
        raise _fail(path, arg, f"cannot write: its folder {_shown(str(folder))} is not writable "
                    f"({_reason(err)})") from None
    os.close(fd)
    os.unlink(name)


def _check_file_there(path: str, arg: str, st: os.stat_result) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise _fail(path, arg, "is a broken symbolic link: refused (the file would be written where it "
                        "points)") from None
    if stat.S_ISDIR(mode):
        raise _fail(path, arg, "is a directory; give a file name inside it")
    if not stat.S_ISREG(mode):
        raise _fail(path, arg, f"is {_kind(mode)}, not a regular file: refused")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise _fail(path, arg, f"cannot write: the file exists and cannot be opened for writing ({_reason(err)})") from None
    os.close(fd)


def _suffix_text(suffixes: tuple[str, ...]) -> str:
    return suffixes[0] if len(suffixes) == 1 else ", ".join(suffixes[:-1]) + " or " + suffixes[-1]


def check_output_path(path, arg: str, suffixes: Iterable[str] | None = None, *, folder: bool = False,
                      inside: str | None = None) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it is sure it can be written (see the module docstring).

    ``arg`` is the flag or argument the user typed (``"--csv"``, ``"out"``), named by every error;
    ``suffixes`` the endings the writer supports (None: any); ``folder=True`` for a folder the writer
    fills (``inside``: the file it writes there, checked too). The folder that holds the file (or the
    folder itself) is created when missing."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise _fail(None, arg, f"must be a file path (str or pathlib.Path), got {type(path).__name__}")
    try:
        text = os.fspath(path)
    except TypeError as err:
        raise _fail(None, arg, f"must be a file path: {err}") from None
    if not isinstance(text, str):
        raise _fail(None, arg, f"must be a text file path, got {type(text).__name__}")
    if not text.strip():
        raise _fail(None, arg, "is empty: give a file path")
    if "\x00" in text:
        raise _fail(text, arg, "contains a NUL byte: not a file path")
    target = Path(text)
    if folder:
        st = _lstat(text, arg)
        if st is not None:
            mode = st.st_mode if not stat.S_ISLNK(st.st_mode) else _followed(text, arg)
            if not stat.S_ISDIR(mode):
                raise _fail(text, arg, f"is {_kind(mode) if not stat.S_ISREG(mode) else 'a file'}, not a folder")
        made = _make_folder(target, text, arg)
        _probe(target, text, arg, made)
        if inside is not None:
            inner = target / inside
            st = _lstat(os.fspath(inner), arg)
            if st is not None:
                _check_file_there(os.fspath(inner), arg, st)
        return target
    allowed = tuple(s.lower() for s in suffixes) if suffixes is not None else None
    if text.endswith((os.sep, "/")) or target.name in ("", ".", ".."):
        raise _fail(text, arg, "names a folder; give a file name"
                    + (f" ending in {_suffix_text(allowed)}" if allowed else ""))
    st = _lstat(text, arg)
    if st is not None:  # what is there first: a directory is "a directory", whatever its name
        _check_file_there(text, arg, st)
    if allowed is not None and target.suffix.lower() not in allowed:
        got = f"{target.suffix!r}" if target.suffix else "no suffix"
        raise _fail(text, arg, f"unsupported file type ({got}): must end in {_suffix_text(allowed)}")
    parent = target.parent
    made = _make_folder(parent, text, arg)
    _probe(parent, text, arg, made)
    return target


def _followed(path: str, arg: str) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        raise _fail(path, arg, "is a broken symbolic link: refused") from None
