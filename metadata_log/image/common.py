"""What every part of the image and its deltas shares: the error of a record that does not fit, and two helpers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import groupby
from typing import Any, Protocol, TypeVar

from ..errors import CorruptData


class InvalidRecord(CorruptData, ValueError):
    """A record that does not apply to the image it was replayed on."""


class _Dataclass(Protocol):
    @property
    def __match_args__(self) -> tuple[str, ...]: ...


_T = TypeVar("_T", bound=_Dataclass)


def evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the image's frozen dataclasses, without its per-call field scan (a large part
    of applying a small record such as a cluster re-registration). Every field of them is a positional init field,
    listed in order by ``__match_args__``."""
    cls = type(obj)
    values = [changes.pop(name) if name in changes else getattr(obj, name) for name in obj.__match_args__]
    if changes:
        raise TypeError(f"{cls.__name__} has no field {sorted(changes)}")
    return cls(*values)


def runs_of(keys: Sequence[str]) -> Iterator[tuple[str, int, int]]:
    """(key, start, stop) of each run of equal consecutive ``keys`` (usually one: a single topic)."""
    if not keys:
        return
    if keys.count(keys[0]) == len(keys):
        yield keys[0], 0, len(keys)
        return
    start = 0
    for key, run in groupby(keys):
        stop = start + sum(1 for _ in run)
        yield key, start, stop
        start = stop
