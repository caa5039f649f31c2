"""``simtrain`` with no arguments: the built-in default job (workloads/jobs/default.yaml when the
estimate exists; the hardware library table until then)."""

from __future__ import annotations


def run(args) -> int:
    try:
        from simtrain.cli.estimate import run_default
    except ModuleNotFoundError:
        from simtrain.cli.specs import print_library
        return print_library()
    return run_default(args)
