"""``simtrain validate``: run the validation suite (``python -m validation``) from the simtrain CLI.

    simtrain validate [--quick] [--device cpu|cuda] [--out DIR] [--measurements PATH]

The suite lives in the repository's ``validation/`` package (it needs torch and the zoo), which is not
part of the wheel: it is found on ``sys.path`` or, when simtrain runs from a source checkout (an
editable install), in that checkout. Elsewhere (a plain ``pip install``) the command says that the
suite needs the source checkout and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys

from simtrain._data import source_checkout
from simtrain.errors import SimtrainError

__all__ = ["register", "run"]


def _validation_cli():
    """``validation.cli`` from sys.path, else from the source checkout simtrain runs from."""
    try:
        return importlib.import_module("validation.cli")
    except ModuleNotFoundError as err:
        root = source_checkout()
        if err.name not in ("validation", "validation.cli") or root is None or str(root) in sys.path:
            raise
        sys.path.append(str(root))
        return importlib.import_module("validation.cli")


def _suite_cli():
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as err:
        raise SimtrainError(f"simtrain validate needs torch (pip install 'simtrain[torch]'): {err}") from None
    try:
        return _validation_cli()
    except ModuleNotFoundError as err:
        raise SimtrainError("simtrain validate runs the validation suite, which is not installed with simtrain: "
                            "it needs the source checkout (run it there, or `python -m validation` from the "
                            f"repository root): {err}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="run the validation suite: real PyTorch vs simtrain's predictions",
                              description="Calibrate this machine from microbenchmarks, train every zoo model for "
                                          "real (plus DDP over gloo and a DataLoader pipeline), compare with "
                                          "simtrain's predictions and write <machine>.{json,md,png}.")
    try:
        add_arguments = _validation_cli().add_arguments
    except ModuleNotFoundError:
        p.add_argument("rest", nargs=argparse.REMAINDER)
    else:
        add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cli = _suite_cli()
    return cli.run_args(args, shlex.join(["simtrain", *sys.argv[1:]]) if sys.argv[1:2] == ["validate"]
                        else "simtrain validate")
