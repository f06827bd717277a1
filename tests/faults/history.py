"""The recorded history: one JSON object per operation, appended to a JSONL file and kept in memory.

Every operation has ``client``, ``op``, ``call`` and ``ret`` (seconds since the run started, monotonic)
and an ``outcome``: ``ok``, ``failed`` (a definite refusal, with its ``status``) or ``unknown`` (a timeout,
a lost connection, a 5xx: the operation may or may not have taken effect). Ops:

- ``write``: ``key`` (the Idempotency-Key; retries of one write share it), ``node``, ``kind`` and its
  arguments, ``offset`` when ok (the committed offset the reply gave);
- ``tail``: ``node``, ``offset`` asked for, ``records`` received as ``[offset, digest]`` pairs;
- ``node``: one poll of ``/v1/node``: ``node``, ``role``, ``term``, ``leader_id``, ``applied_offset``;
- ``metadata``: a ``GET /v1/metadata`` body with its ``offset``, to compare with ``apply`` of the log;
- ``fault``: what the nemesis did (``kind``, ``node``), for reading a failing run.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any


def record_digest(record: dict[str, Any]) -> str:
    """A short digest of one log record (offset, type and data), the same for JSON from any node."""
    canonical = json.dumps([record["offset"], record["type"], record["data"]], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class History:
    """Thread-safe: clients, the observer and the nemesis append from their own threads."""

    def __init__(self, path: Path | None = None) -> None:
        self.ops: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._file = open(path, "w") if path is not None else None  # noqa: SIM115 - closed in close()

    def now(self) -> float:
        return round(time.monotonic() - self._started, 4)

    def add(self, op: dict[str, Any]) -> None:
        line = json.dumps(op, separators=(",", ":"))
        with self._lock:
            self.ops.append(op)
            if self._file is not None:
                self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
