"""Types of the C module kafka_wire/_records.c (see its comment)."""

from typing import Any

def split(
    body: Any,
    count: int,
    base_ts: int,
    targets: bytes,
    stamped: bytes,
    keyless: int,
    header: bytes,
    groups: dict[int, list[Any]],
    /,
) -> int | None: ...
