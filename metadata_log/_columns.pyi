"""Types of the C module metadata_log/_columns.c (see its comment)."""

from collections.abc import Sequence
from typing import Any

def take_run(
    records: Sequence[Any], start: int, cls: type, members: tuple[Any, ...], types: tuple[tuple[type, ...], ...], /
) -> tuple[int, list[list[Any]], list[bool], list[bool]]: ...
