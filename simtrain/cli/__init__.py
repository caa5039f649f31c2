"""Command line: thin. Parses arguments, calls the verbs, prints reports.

Bad input exits with status 2 and a short message (file, field, reason), never a traceback;
``--debug`` shows one. Each subcommand lives in its own module with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from simtrain import __version__
from simtrain.errors import SimtrainError

__all__ = ["main", "build_parser"]

#: subcommand modules, in help order; each defines register(subparsers) and sets func on its parser.
SUBCOMMANDS = ("specs", "stacks", "check", "model", "estimate", "simulate", "sweep", "plan", "calibrate", "validate",
               "compare", "plot", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simtrain", description="Capacity planning for ML training: "
                                     "estimate / simulate step time, memory and cost before you spend a GPU-month.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"simtrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"simtrain.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"simtrain.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


#: optional packages (pyproject's extras) a verb may import: a missing one is an install hint, not a traceback
_EXTRAS = {"torch": "torch", "distributed": "dask", "dask": "dask"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        from simtrain.cli import default
        args.func = default.run
    try:
        return int(args.func(args) or 0)
    except SimtrainError as err:  # SpecError included: bad input names its file / field / flag
        if args.debug:
            raise
        return _refuse(args, str(err), type(err).__name__, getattr(err, "fields", []))
    except ModuleNotFoundError as err:
        extra = _EXTRAS.get((err.name or "").split(".")[0])
        if extra is None or args.debug:
            raise
        return _refuse(args, f"`simtrain {args.command}` needs the optional package {err.name.split('.')[0]!r}: "
                             f"pip install 'simtrain[{extra}]'", "MissingExtra", [])
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _refuse(args, message: str, kind: str, fields: list[str]) -> int:
    """Exit 2: the message on stderr, and with ``--json`` also as a JSON object on stdout (a script
    reading stdout gets an answer it can parse, not nothing)."""
    print(f"simtrain: error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        import json
        print(json.dumps({"error": message, "type": kind, "fields": list(fields)}))
    return 2


if __name__ == "__main__":
    sys.exit(main())
