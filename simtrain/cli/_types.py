"""argparse types that refuse a value at the flag, with argparse's own exit 2 and usage line."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """A whole number ≥ 1 (``--top 0`` would print nothing and call it "no feasible point")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value
