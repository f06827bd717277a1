"""argparse types that every kfed command line shares (``kfed`` and its groups, ``kfed gateway``): a bad value is
argparse's one-line error naming the flag, never a traceback."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be a non-negative integer")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number")
    return value
