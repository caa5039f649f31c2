"""``simtrain check FILE...``: validate spec and job files on their own.

The kind comes from each file's ``spec:`` header. A job is also checked against its cluster (the
layout must use exactly the cluster's devices; :func:`simtrain.specs.train.layout_problems`) and, when
models can be loaded, against its model (heads, blocks, experts, sequence length). Every file is
checked and reported ("OK <file>" on stdout, each problem on stderr as file: field: reason); the exit
status is 2 when any file failed, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.library import load_cluster, read_spec_document, resolve_reference, validate_document
from simtrain.specs.train import layout_problems

__all__ = ["register", "run", "check_file", "MODEL_CHECKS_SKIPPED"]

MODEL_CHECKS_SKIPPED = "model checks skipped: model loading is not available yet"


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="validate spec or job files (exit 2 if any is bad)",
                              description="Validate hardware spec, efficiency, model and job files.")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files with a `spec:` header")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    failed = 0
    for name in args.files:
        try:
            note = check_file(name)
        except SpecError as err:
            if getattr(args, "debug", False):
                raise
            failed += 1
            for issue in err.issues:
                print(f"simtrain: error: {_with_file(issue, name)}", file=sys.stderr)
            continue
        print(f"OK {name}" + (f"  ({note})" if note else ""))
    if failed and len(args.files) > 1:
        print(f"simtrain: {failed} of {len(args.files)} files failed", file=sys.stderr)
    return 2 if failed else 0


def _with_file(issue: SpecIssue, file: str) -> SpecIssue:
    return issue if issue.file else SpecIssue(file, issue.field, issue.reason)


def check_file(path: str | os.PathLike) -> str | None:
    """Validate one file; raise :class:`SpecError` naming file, field and reason. Returns a note
    about checks that could not run (or None)."""
    file = os.fspath(path)
    kind, body = read_spec_document(Path(file))
    try:
        spec = validate_document(kind, body, file)
    except ImportError:
        if kind != "model":
            raise
        return "model schema not available yet: only the header and YAML were checked"
    if kind == "job":
        return _check_job(spec, file)
    return None


def _check_job(job, file: str) -> str | None:
    """A job against its cluster (world size) and, when loadable, its model; all problems at once."""
    try:
        cluster = load_cluster(_resolve(job.cluster, file), nodes=job.nodes)
    except SpecError as err:
        raise _prefixed(err, file, "cluster") from None
    issues: list[SpecIssue] = []
    try:
        model, note = _load_job_model(job.model, file)
    except SpecError as err:
        model, note = None, None
        issues += _prefixed(err, file, "model").issues
    where = f"cluster {cluster.name} with {cluster.devices_count} devices"
    issues += [SpecIssue(file, "config", f"{p} ({where})")
               for p in layout_problems(job.config, cluster.devices_count, model)]
    if issues:
        raise SpecError(issues)
    return note


def _load_job_model(name: str, file: str):
    """(model, note): the job's model, or None and why its checks were skipped."""
    try:
        from simtrain.graph.library import load_model
    except ImportError:
        return None, MODEL_CHECKS_SKIPPED
    try:
        return load_model(_resolve(name, file)), None
    except ImportError:
        return None, MODEL_CHECKS_SKIPPED


def _resolve(value: str, file: str) -> str:
    """A path in a job is relative to the job file and may not leave its folder (no absolute paths,
    no ``..``, no symlink out: :func:`simtrain.specs.library.resolve_reference`)."""
    return resolve_reference("job", value, file)


def _prefixed(err: SpecError, file: str, field: str) -> SpecError:
    """Issues of a referenced item, attributed to the job's ``field`` when they name no file."""
    issues = []
    for i in err.issues:
        if i.file:
            issues.append(SpecIssue(file, field, f"{i.file}: {i.field or '<document>'}: {i.reason}"))
        else:
            issues.append(SpecIssue(file, field, i.reason))
    return SpecError(issues)
