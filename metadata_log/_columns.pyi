"""Types of the C module metadata_log/_columns.c (see its comment)."""

from typing import Any

def take_run(
    records: tuple[Any, ...], start: int, cls: type, members: tuple[Any, ...], types: tuple[tuple[type, ...], ...], /
) -> tuple[int, list[list[Any]], list[bool], list[bool]]: ...
