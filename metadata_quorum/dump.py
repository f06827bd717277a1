"""The node's full dump: checked before pysyncobj starts, captured on the Raft thread, written on a thread of its own.

pysyncobj compacts its log by writing a full dump of the state (its "serializer"), then truncating the journal
behind it. Ours holds the records in msgpack (``LogState.dump``: length + CRC framed), not pickle, together with
pysyncobj's own bookkeeping (the last two entries the dump covers, and the voters), and:

- is encoded, fsynced, renamed and its directory fsynced on a writer thread, while the Raft thread goes on
  (``DumpWriter``); pysyncobj truncates its journal only once that is done;
- when received from the leader, is fsynced, renamed and its directory fsynced before pysyncobj loads it and
  clears its journal; a dump being written meanwhile is dropped, never renamed over it;
- is checked at start before pysyncobj reads it (``NodeDump.check``): a damaged dump stops the node instead
  of pysyncobj's silent empty start.

Nothing here imports pysyncobj: the bridge adapts ``DumpWriter`` to pysyncobj's serializer interface.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO

from .journal import fsync_path
from .state import CorruptState, LogState

log = logging.getLogger(__name__)


class DumpState(Enum):
    IDLE = "idle"  # no dump started since the last one was reported
    WRITING = "writing"
    WRITTEN = "written"  # durable: the journal may be truncated behind it
    FAILED = "failed"  # the journal is kept; a later compaction tries again


class DumpWriter:
    """Writes dumps to ``file_name``, one at a time, each on a thread of its own; and installs the dumps received
    from the leader (``receive``).

    ``start`` runs on the Raft thread with an ``encode`` function that only holds an immutable capture of the
    state; the writer thread encodes it, writes ``<dump>.tmp``, fsyncs it, renames it over the dump and fsyncs
    the directory. Encoding a 1M-partition image takes seconds: done on the Raft thread, it would cost the
    leader its leadership.

    A dump received meanwhile is newer than the one being written: each install bumps a generation, under
    the lock the writer renames under, and a writer that started in an older generation gives up instead of
    renaming its older state over the received one."""

    def __init__(self, file_name: str) -> None:
        self._file_name = file_name
        self._writer: threading.Thread | None = None
        self._written_ok = False
        self._dump_id: Any = None
        self._rename_lock = threading.Lock()
        self._generation = 0  # dumps received from the leader so far
        self._received: BinaryIO | None = None  # the one being received, chunk by chunk

    @property
    def busy(self) -> bool:
        """A dump was started and its end not yet reported by ``poll``: ``start`` now would be ignored."""
        return self._writer is not None

    def start(self, encode: Callable[[], bytes], dump_id: Any) -> None:
        """Write ``encode()`` as the new dump, identified by ``dump_id``; ignored while ``busy``."""
        if self._writer is not None:
            return
        self._dump_id = dump_id
        self._writer = threading.Thread(
            target=self._write, args=(encode, self._generation), name="kfed-dump", daemon=True
        )
        self._writer.start()

    def poll(self) -> tuple[DumpState, Any]:
        """The state of the dump last started, and its id; a finished one is reported once, then IDLE."""
        if self._writer is None:
            return DumpState.IDLE, None
        if self._writer.is_alive():
            return DumpState.WRITING, self._dump_id
        self._writer = None
        return (DumpState.WRITTEN if self._written_ok else DumpState.FAILED), self._dump_id

    def _write(self, encode: Callable[[], bytes], generation: int) -> None:
        started = time.monotonic()
        tmp = self._file_name + ".tmp"
        self._written_ok = False
        try:
            data = encode()
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with self._rename_lock:
                if generation != self._generation:
                    log.info("a dump from the leader was installed while this one was written: this one is dropped")
                else:
                    self._install(tmp)
                    self._written_ok = True
                    log.info("dump of %d bytes written in %.2f s", len(data), time.monotonic() - started)
        except Exception:
            log.exception("writing the state dump failed; the journal is kept")
        if not self._written_ok:
            with contextlib.suppress(OSError):  # e.g. a half-written dump on a full disk
                os.unlink(tmp)

    def _install(self, tmp: str) -> None:
        """Rename the fsynced ``tmp`` over the dump and fsync the directory (the rename)."""
        os.replace(tmp, self._file_name)
        fsync_path(os.path.dirname(self._file_name) or ".")

    def receive(self, chunk: bytes, first: bool, last: bool) -> bool:
        """One chunk of a dump sent by the leader (pysyncobj's ``setTransmissionData``); True once the last
        chunk made it this node's dump: written to ``<dump>.1.tmp``, fsynced, renamed over the dump and the
        directory fsynced, before pysyncobj loads it and clears its journal. False otherwise, also when it
        could not be written (logged; the leader sends it again)."""
        tmp = self._file_name + ".1.tmp"
        try:
            if first:
                if self._received is not None:
                    self._received.close()
                self._received = open(tmp, "wb")  # noqa: SIM115  # kept open across chunks
            if self._received is None:
                return False  # a chunk of a transmission whose start this node did not get
            self._received.write(chunk)
            if not last:
                return False
            received, self._received = self._received, None
            with received:
                received.flush()
                os.fsync(received.fileno())
            with self._rename_lock:
                self._generation += 1
                self._install(tmp)
            return True
        except OSError:
            log.exception("receiving the leader's dump failed")
            if self._received is not None:
                self._received.close()
                self._received = None
            return False


RaftBookkeeping = tuple[list[Any], list[Any], list[str]]
"""What pysyncobj keeps in a dump besides the state: its last entry, the entry before it (both as
[command, index, term]), and the voters' Raft addresses."""


class NodeDump:
    """This node's dump file and the ``LogState`` it holds: what pysyncobj's dump hooks do, in kfed's terms."""

    def __init__(self, path: Path, state: LogState) -> None:
        self.path = path
        self.state = state
        self._loaded: dict[str, Any] | None = None  # checked at start, handed to pysyncobj once

    def check(self) -> dict[str, Any] | None:
        """Load and check the dump before pysyncobj does (it swallows errors and starts empty): pysyncobj's
        bookkeeping as stored (``last``, ``prev``, ``cluster``), or None without a dump."""
        if not self.path.exists():
            return None
        data = self.path.read_bytes()
        try:
            internal: dict[str, Any] = self.state.load(data)
        except CorruptState as e:
            raise CorruptState(f"{self.path}: {e}. Refusing to start; restore the file or wipe the data dir.") from e
        log.info("loaded dump %s at offset %d (%d bytes)", self.path, self.state.image.offset, len(data))
        self._loaded = internal
        return internal

    def capture(self, last: Sequence[Any], prev: Sequence[Any], cluster: Iterable[str]) -> Callable[[], bytes]:
        """On the Raft thread: our state and pysyncobj's bookkeeping, frozen; the encoding runs later."""
        started = time.monotonic()
        encode = self.state.capture({"last": list(last), "prev": list(prev), "cluster": sorted(cluster)})
        log.debug("state captured for a dump in %.1f ms", (time.monotonic() - started) * 1000)
        return encode

    def restore(self, file_name: str) -> RaftBookkeeping:
        """pysyncobj loads a dump: the one checked at start, or one received from the leader (InstallSnapshot,
        §7) since, which is loaded into the state here."""
        internal = self._loaded
        if internal is None:
            started = time.monotonic()
            data = Path(file_name).read_bytes()
            internal = self.state.load(data)
            seconds = time.monotonic() - started
            log.info("installed the leader's dump at offset %d (%d bytes) in %.2f s", self.state.image.offset,
                     len(data), seconds)  # fmt: skip
        self._loaded = None
        return list(internal["last"]), list(internal["prev"]), list(internal["cluster"])
