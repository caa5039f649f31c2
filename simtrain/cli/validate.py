"""``simtrain validate``: run the validation suite (``python -m validation``) from the simtrain CLI.

    simtrain validate [--quick] [--device cpu|cuda] [--out DIR] [--measurements PATH]

The suite lives in the repository's ``validation/`` package (it needs torch and the zoo); when that
package cannot be imported the command says so and exits 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from simtrain.errors import SimtrainError

__all__ = ["register", "run"]


def _suite_cli():
    try:
        import torch  # noqa: F401

        from validation import cli
    except ModuleNotFoundError as err:
        raise SimtrainError(f"simtrain validate needs torch and the repository's validation/ package "
                            f"(run it from the repository root): {err}") from None
    return cli


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="run the validation suite: real PyTorch vs simtrain's predictions",
                              description="Calibrate this machine from microbenchmarks, train every zoo model for "
                                          "real (plus DDP over gloo and a DataLoader pipeline), compare with "
                                          "simtrain's predictions and write <machine>.{json,md,png}.")
    try:
        from validation.cli import add_arguments
    except ModuleNotFoundError:
        p.add_argument("rest", nargs=argparse.REMAINDER)
    else:
        add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cli = _suite_cli()
    return cli.run_args(args, shlex.join(["simtrain", *sys.argv[1:]]) if sys.argv[1:2] == ["validate"]
                        else "simtrain validate")
