"""The node's read model on the asyncio loop: the latest image and the retention window of the log.

``LogState`` publishes each committed command from the Raft thread; ``ReadModel.on_update`` (a
``MetadataPublisher``) runs on the loop, handed over in order, keeps each record (encoded to JSON once, on
first read) and wakes the long-poll and SSE tailers. Because the Raft thread hands over the update before it
completes the write's future, a write's reply is never sent before its records are readable here.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from metadata_log.codec import PACK_CHUNK_ITEMS, record_to_dict
from metadata_log.errors import Gone
from metadata_log.heap import gc_paused
from metadata_log.image import EMPTY_IMAGE, MetadataImage
from metadata_log.publisher import LogDelta
from metadata_log.records import Record
from metadata_log.snapshot import pack_body, write_records

DEFAULT_RETENTION_RECORDS: Final = 100_000


class Entry:
    """One committed record; its JSON encoding is made on first read and shared by every later reader.

    Lazily: most records are never read by offset, and encoding each at publish would be a sizeable part of a
    bulk write's CPU. Only the loop thread publishes and reads, so the cache needs no lock."""

    __slots__ = ("_json", "offset", "record")

    def __init__(self, offset: int, record: Record) -> None:
        self.offset = offset
        self.record = record
        self._json: bytes | None = None

    @property
    def json(self) -> bytes:
        encoded = self._json
        if encoded is None:
            encoded = self._json = orjson.dumps(self.as_dict())
        return encoded

    def as_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, "type": self.record.TYPE, "data": record_to_dict(self.record)}


@dataclass(frozen=True, slots=True)
class LogPage:
    entries: Sequence[Entry]
    next_offset: int
    high_watermark: int
    log_start_offset: int


SNAPSHOT_REUSE_S: Final = 30.0
"""How long ``GET /v1/snapshot`` may answer with an already encoded snapshot instead of the newest image."""


def json_chunked(offset: int, records: Iterable[dict[str, Any]]) -> bytes:
    """``orjson.dumps({"offset": offset, "records": list(records)})``, byte for byte, encoded a slice of
    ``PACK_CHUNK_ITEMS`` records per call: one call for a 1M-partition snapshot holds the GIL for about a
    second (see ``pack_chunked``). The records are taken a slice at a time and the bytes written to one
    buffer, so neither all records nor all slices are held at once: at 1M partitions with their leaders,
    the dicts alone took ~1 GB."""
    out = io.BytesIO()
    out.write(b'{"offset":%d,"records":[' % offset)
    records = iter(records)
    separator = b""
    while chunk := list(itertools.islice(records, PACK_CHUNK_ITEMS)):
        out.write(separator + orjson.dumps(chunk)[1:-1])
        separator = b","
    out.write(b"]}")
    return out.getvalue()


class Snapshot:
    """The image at ``offset`` as records; each encoding is made once, on first use."""

    __slots__ = ("_json", "_msgpack", "_runs", "image", "made", "offset")

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self.made = time.monotonic()
        self._json: bytes | None = None
        self._msgpack: bytes | None = None
        self._runs: bytes | None = None

    @property
    def json(self) -> bytes:
        """Readable form: records as ``{"type", "data": {field: value}}``."""
        if self._json is None:
            with gc_paused():
                records = ({"type": r.TYPE, "data": record_to_dict(r)} for r in write_records(self.image))
                self._json = json_chunked(self.offset, records)
        return self._json

    @property
    def msgpack(self) -> bytes:
        """Bulk form for machines: records in the codec's positional wire form ``[type, version, fields...]``
        (a 1M-partition snapshot loads several times faster than from field maps)."""
        if self._msgpack is None:
            self._msgpack = pack_body(self.image, "rows")
        return self._msgpack

    @property
    def runs(self) -> bytes:
        """Compact form for machines (``layout=runs``): ``{"offset", "runs"}``, runs of one record type as
        columns; a 1M-partition snapshot is a fraction of the size and loads faster."""
        if self._runs is None:
            self._runs = pack_body(self.image, "runs")
        return self._runs


class ReadModel:
    """Image + window of the last ``retention_records`` records (kept between N and 1.25 N)."""

    def __init__(self, retention_records: int = DEFAULT_RETENTION_RECORDS) -> None:
        if retention_records < 1:
            raise ValueError("retention_records must be >= 1")
        self.retention_records = retention_records
        self.image: MetadataImage = EMPTY_IMAGE
        # Entry, or the bare record until a reader first asks for it (one object less per record for the
        # garbage collector to walk; its offset is its place in the window)
        self._entries: list[Entry | Record] = []
        self._start = 0  # offset of self._entries[0]
        self._changed = asyncio.Event()
        self._snapshot: Snapshot | None = None

    def reset(self, image: MetadataImage) -> None:
        """Start from an image loaded from disk: the window begins right after it."""
        self.image = image
        self._entries = []
        self._start = image.offset + 1
        self._snapshot = None
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- writer side (loop thread) ----------------------------------------------------------------
    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        """Records committed at ``delta.first_offset``, ... and the image after them; a snapshot delta: the
        state was replaced by ``image`` (``reset``)."""
        if delta.snapshot:
            self.reset(image)
            return
        if delta.first_offset != self.high_watermark:
            # Never a silent skip: a gap means this model missed an update (a bug), or was reset.
            raise AssertionError(f"read model at {self.high_watermark} got records from {delta.first_offset}")
        self._entries += delta.records  # made Entry objects when first read
        self.image = image
        overshoot = len(self._entries) - self.retention_records
        if overshoot > self.retention_records // 4:
            del self._entries[:overshoot]
            self._start += overshoot
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- reader side ------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        """Offset the next committed record will get (= last applied offset + 1)."""
        return self.image.offset + 1

    @property
    def log_start_offset(self) -> int:
        return self._start

    def read(self, offset: int, limit: int) -> LogPage:
        if offset < self._start:
            raise Gone(
                f"offset {offset} is below the retention window (log_start_offset {self._start}); "
                f"load GET /v1/snapshot and continue after its offset",
                log_start_offset=self._start,
                snapshot_offset=self.image.offset,
            )
        i = offset - self._start
        window = self._entries
        entries: list[Entry] = []
        for j in range(i, min(i + limit, len(window))):
            item = window[j]
            if not isinstance(item, Entry):
                item = window[j] = Entry(self._start + j, item)  # kept: later readers share its JSON encoding
            entries.append(item)
        next_offset = entries[-1].offset + 1 if entries else max(offset, self._start)
        return LogPage(entries, next_offset, self.high_watermark, self._start)

    async def wait_beyond(self, offset: int, timeout_s: float) -> bool:
        """Wait until a record with ``offset`` exists; False on timeout."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.high_watermark <= offset:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return False
        return True

    def snapshot(self, min_offset: int = -1) -> Snapshot:
        """The image as records: the current one, or a recent one not older than ``min_offset``.

        Encoding a 1M-partition image takes the node seconds of CPU (time its Raft thread then lacks), so a
        snapshot is reused for ``SNAPSHOT_REUSE_S`` while the window still holds every record after it: a
        reader that loads it continues the log at its offset + 1 and misses nothing."""
        snap = self._snapshot
        current = snap is not None and snap.offset == self.image.offset
        recent = (
            snap is not None
            and time.monotonic() - snap.made < SNAPSHOT_REUSE_S
            and snap.offset + 1 >= self._start
            and snap.offset >= min_offset
        )
        if snap is None or not (current or recent):
            snap = self._snapshot = Snapshot(self.image)
        return snap
