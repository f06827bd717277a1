"""Waiting for a condition in tests that drive real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """The first truthy value of ``predicate``; fails the test when there is none within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(interval_s)
