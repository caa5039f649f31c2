"""The environment a benchmark's child process runs in (the collective ranks, the lockstep jitter
ranks): the parent's, with this simtrain first on the import path."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["child_env"]


def child_env() -> dict[str, str]:
    """The parent's environment, with the folder holding this simtrain first on PYTHONPATH (so a child
    imports the same simtrain even when it runs from a checkout that is not installed)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env
