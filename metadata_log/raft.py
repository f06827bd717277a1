"""The Raft shell: one pysyncobj node around ``LogState``. The only module that imports pysyncobj.

What this layer adds to pysyncobj, each for a measured reason (see docs/PYSYNCOBJ.md):
- exactly one replicated method, taking bytes; it never raises (``LogState.apply_command``);
- its own full dump (records in msgpack, not pickle; length+CRC framed), written off the Raft thread
  from the immutable image, fsynced, renamed and the directory fsynced before pysyncobj truncates
  its journal; a damaged dump stops the node at start instead of pysyncobj's silent empty start;
- an fsynced journal (pysyncobj's mmap journal never syncs: power loss could lose acknowledged entries);
- CheckQuorum at election scale, fast reconnects, and fail-fast proposals without a leader;
- a bridge from the Raft thread to asyncio (``propose`` returns an awaitable; callbacks never block);
- guards against self-inflicted elections: time this node's Raft thread spent on its own work or could
  not run (applying a catch-up backlog, the GIL held by a garbage collection or a dump) does not count
  against its peers (``_Replica._onTick``); and a pre-vote (pysyncobj has none): a node whose election
  timeout expired asks first whether a majority would vote for it, and campaigns, which raises the
  term and deposes the leader, only then (``PreVote``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import mmap
import os
import platform
import queue
import struct
import sys
import threading
import time
import weakref
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pysyncobj.journal as pso_journal
import pysyncobj.pickle as pso_pickle
import pysyncobj.syncobj as _pso
import pysyncobj.tcp_connection as pso_tcp
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.journal import FileJournal, MemoryJournal
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.node import TCPNode
from pysyncobj.serializer import Serializer

from .errors import OutcomeUnknown, Unavailable
from .state import CorruptState, LogState, Outcome, Proposal

log = logging.getLogger(__name__)

APPEND_ENTRIES_BATCH_BYTES: Final = 4 * 1024 * 1024
SOCKET_BUFFER_BYTES: Final = 4 * 1024 * 1024
"""Kernel send and receive buffer of each Raft connection (pysyncobj pins them to 64 KiB; see ``conf``)."""
DISK_HEADROOM_BYTES: Final = 1024 * 1024
"""A write is refused (503) unless the disk keeps this much free after the journal grows for it."""
PICKLE_PROTOCOL: Final = 4
"""What pysyncobj pickles Raft commands and messages with (its own is 2); see ``RaftNode.__init__``."""
PRE_VOTE_CLOCK_MARGIN_S: Final = 0.005
STALL_GUARD_MS: Final = 50
"""A Raft tick that takes this much longer than its socket wait is a stall of this node (see module doc)."""


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """Every pysyncobj option we set, explicitly (the defaults give 100 ms commits and lose state)."""

    election_timeout_ms_min: int = 300
    election_timeout_ms_max: int = 900
    heartbeat_ms: int = 50  # appendEntriesPeriod; must stay below election_timeout_ms_min / 3
    compaction_min_entries: int = 100_000  # default 5,000 re-dumps a big image far too often
    # With logCompactionSplit each node may only dump in its own 30% slice of its third of this
    # period, so a node can wait up to ~one period after crossing compaction_min_entries.
    compaction_min_s: int = 120
    journal_fsync: bool = True  # msync the journal after every append before it is acknowledged
    password: str | None = None  # encrypts + authenticates Raft traffic (needs `cryptography`)
    # Listen here instead of on the node's own Raft address (which peers dial and which identifies the
    # node): for a node behind a NAT or port mapping, or a fault-injection proxy in tests.
    bind_address: str | None = None
    command_queue_size: int = 10_000
    # zlib level of Raft messages. pysyncobj compresses every message at level 3, once per follower, on the
    # Raft thread of the leader; level 0 (stored blocks: still a zlib stream every pysyncobj node reads,
    # framed by ``zlib_stored``) costs 13 instead of 157 us per 16 KB command. Raise it for links where
    # bandwidth costs more than CPU.
    wire_compression: int = 0

    def conf(self, data_dir: Path, node: RaftNode) -> SyncObjConf:
        return SyncObjConf(
            # Entries leave at once instead of on the next heartbeat (100 ms commits otherwise);
            # we batch records per command ourselves (group commit in the controller).
            appendEntriesUseBatch=False,
            # pysyncobj 0.3.17 splits a command above this size into chunks and detects the last chunk by
            # the command's length, not the pickled entry's, so commands over 64 KiB (the default) fail
            # to replicate ("pickle data was truncated"). Group commit makes such commands routinely.
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
            # pysyncobj sets SO_SNDBUF/SO_RCVBUF of every Raft socket to 64 KiB (which also stops Linux from
            # sizing them itself) and sends a dump to a follower in 64 KiB messages. Catching a follower up
            # means tens of MB queued on the leader, and each send() of 128 KiB copied the rest of that queue
            # (pysyncobj slices a bytes buffer), holding the GIL. Bigger buffers, and dump messages as big as
            # log batches, move the same bytes with ~30x fewer copies.
            sendBufferSize=SOCKET_BUFFER_BYTES,
            recvBufferSize=SOCKET_BUFFER_BYTES,
            logCompactionBatchSize=APPEND_ENTRIES_BATCH_BYTES,
            appendEntriesPeriod=self.heartbeat_ms / 1000,
            raftMinTimeout=self.election_timeout_ms_min / 1000,
            raftMaxTimeout=self.election_timeout_ms_max / 1000,
            # Reconnect to a peer that was down within half a second (default 5 s delays a restarted
            # node's return, and a node started before its peers, by that long).
            connectionRetryTime=0.5,
            # CheckQuorum: a leader that heard from no majority for an election timeout steps down
            # (default 30 s, during which an isolated leader keeps taking writes that cannot commit).
            leaderFallbackTimeout=self.election_timeout_ms_max / 1000,
            # Fail fast without a leader: the HTTP edge answers 503 + Retry-After instead of queueing.
            commandsWaitLeader=False,
            # Voters can be added and removed one at a time (kfed quorum add-voter / remove-voter); the
            # membership lives in the Raft log and the dump, the config only seeds a first start.
            dynamicMembershipChange=True,
            commandsQueueSize=self.command_queue_size,
            # Journal *and* full dump: a journal alone comes back empty after a compaction + restart.
            journalFile=str(data_dir / "raft.journal"),
            fullDumpFile=str(data_dir / "raft.dump"),
            # Our serializer only captures the state on the Raft thread; _ThreadedDumpWriter (installed
            # below as pysyncobj's Serializer) encodes, fsyncs and renames it on a thread of its own.
            serializer=node._capture,
            deserializer=node._deserialize,
            logCompactionMinEntries=self.compaction_min_entries,
            logCompactionMinTime=self.compaction_min_s,
            logCompactionSplit=True,  # nodes compact at different times, never all at once
            password=self.password,
            bindAddress=self.bind_address,
            onStateChanged=node._on_state_changed,
        )


class _WireZlib:
    """Stands in for the ``zlib`` module in pysyncobj's TCP connections: its fixed level 3 becomes ours.
    Process-wide, like the module it replaces (every node of one process uses the same setting)."""

    decompress = staticmethod(zlib.decompress)

    def __init__(self, level: int) -> None:
        self.level = level

    def compress(self, data: bytes, _level: int = -1) -> bytes:
        if self.level == 0:
            return zlib_stored(data)
        return zlib.compress(data, self.level)


_STORED_BLOCK: Final = 0xFFFF  # the most a stored deflate block holds (RFC 1951, 3.2.4)
_STORED_HEAD: Final = struct.Struct("<BHH")  # BFINAL|BTYPE=00 (byte-aligned), LEN, NLEN
_ZLIB_HEAD: Final = b"\x78\x01"  # deflate, 32 KB window, no dictionary, "fastest" (FCHECK: a multiple of 31)


def zlib_stored(data: bytes) -> bytes:
    """``zlib.compress(data, 0)`` by hand: a zlib stream (RFC 1950) of stored deflate blocks, which any zlib
    reads. zlib's own level 0 still sets up a deflate stream per call (~256 KB of state at the default window),
    and pysyncobj compresses every message: 8% of a busy follower's py-spy samples, for a few bytes of framing."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = [_ZLIB_HEAD]
    start = 0
    while True:
        block = view[start : start + _STORED_BLOCK]
        start += len(block)
        final = start >= len(data)
        parts += (_STORED_HEAD.pack(final, len(block), len(block) ^ 0xFFFF), block)
        if final:
            break
    parts.append(zlib.adler32(data).to_bytes(4, "big"))
    return b"".join(parts)


_JOURNAL_NAME: Final = b"PYSYNCOBJ"
_LEGACY_FORMAT: Final = 1  # pysyncobj's own: no checksums
_CHECKED_FORMAT: Final = 0x4B460002  # ours: a CRC-32 in front of each entry's command ("KF", v2)
_HEADER_SIZE: Final = pso_journal.FIRST_RECORD_OFFSET
_END_FIELD: Final = pso_journal.LAST_RECORD_OFFSET_OFFSET
_FORMAT_FIELD: Final = pso_journal.NAME_SIZE + pso_journal.VERSION_SIZE
_ENTRY_HEAD: Final = struct.Struct("<IQQ")  # size of (idx, term, [crc,] command); idx; term


def _entry_crc(idx: int, term: int, command: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(struct.pack("<QQ", idx, term) + command))


def _encode_entry(command: bytes, idx: int, term: int) -> bytes:
    body = struct.pack("<QQ", idx, term) + _entry_crc(idx, term, command) + command
    size = struct.pack("<I", len(body))
    return size + body + size


def read_journal(path: Path) -> tuple[int, list[tuple[bytes, int, int]]]:
    """Check a journal file end to end and return (format, entries); ``CorruptState`` names what is wrong.

    Layout (pysyncobj's): a 40-byte header whose last field is the end of the valid entries, then entries
    framed ``size | idx | term | command | size``; ours puts a CRC-32 of (idx, term, command) before the
    command. Bytes past the header's end are an append that never completed: ignored, as pysyncobj does.
    Inside it every entry must be whole, framed, checksummed, and follow the previous one (idx + 1, term
    not lower): see ``_CheckedJournal`` for why nothing inside the end can be a legitimately torn write.
    """
    data = path.read_bytes()

    def corrupt(why: str) -> CorruptState:
        return CorruptState(
            f"{path}: {why}. Refusing to start: restore the file, or wipe this node's data dir so that it "
            "catches up from the other voters"
        )

    if len(data) < _HEADER_SIZE or not data.startswith(_JOURNAL_NAME):
        raise corrupt(f"not a Raft journal (file of {len(data)} bytes, bad header)")
    fmt, end = struct.unpack_from("<II", data, _FORMAT_FIELD)
    if fmt not in (_LEGACY_FORMAT, _CHECKED_FORMAT):
        raise corrupt(f"unknown journal format {fmt:#x}")
    if not _HEADER_SIZE <= end <= len(data):
        raise corrupt(f"truncated: the header says entries end at byte {end}, the file has {len(data)} bytes")
    checked = fmt == _CHECKED_FORMAT
    entries: list[tuple[bytes, int, int]] = []
    pos = _HEADER_SIZE
    while pos < end:
        where = f"entry {len(entries)} at byte {pos}"
        if pos + _ENTRY_HEAD.size > end:
            raise corrupt(f"{where} is cut short")
        size, idx, term = _ENTRY_HEAD.unpack_from(data, pos)
        if size < 16 + (4 if checked else 0) or pos + 8 + size > end:
            raise corrupt(f"{where} has a bad size ({size} bytes)")
        (trailer,) = struct.unpack_from("<I", data, pos + 4 + size)
        if trailer != size:
            raise corrupt(f"{where} is damaged (its two size fields differ)")
        command = data[pos + 20 : pos + 4 + size]
        if checked:
            crc, command = command[:4], command[4:]
            if crc != _entry_crc(idx, term, command):
                raise corrupt(f"{where} (Raft index {idx}) fails its checksum")
        if entries and (idx != entries[-1][1] + 1 or term < entries[-1][2]):
            raise corrupt(f"{where} breaks the sequence (index {idx}, term {term} after {entries[-1][1:]})")
        entries.append((command, idx, term))
        pos += 8 + size
    return fmt, entries


def _write_journal_file(path: Path, entries: Sequence[tuple[bytes, int, int]]) -> None:
    """Write a whole journal next to ``path`` and rename it over: crash-atomic (fsync, rename, fsync dir)."""
    body = b"".join(_encode_entry(*e) for e in entries)
    name = _JOURNAL_NAME.ljust(pso_journal.NAME_SIZE, b"\0") + pso_journal.APP_VERSION.ljust(
        pso_journal.VERSION_SIZE, b"\0"
    )
    header = name + struct.pack("<II", _CHECKED_FORMAT, _HEADER_SIZE + len(body))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header + body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_path(str(path.parent))


_MS_SYNC: Final = 4  # <sys/mman.h> of Linux's generic ABI; Alpha, PA-RISC and others number it differently
_MS_SYNC_IS_4: Final = frozenset(
    {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "riscv64", "ppc64le", "s390x"}
)


def _load_msync() -> Any:
    """libc's msync where its MS_SYNC is known to be ``_MS_SYNC``; None elsewhere (``mmap.flush`` is used)."""
    if not sys.platform.startswith("linux") or platform.machine() not in _MS_SYNC_IS_4:
        return None
    try:
        msync = ctypes.CDLL(None, use_errno=True).msync
    except (OSError, AttributeError):
        return None
    msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    msync.restype = ctypes.c_int
    return msync


_msync: Final = _load_msync()


def sync_range(mm: mmap.mmap, offset: int, size: int) -> None:
    """Make bytes ``[offset, offset + size)`` of a shared file mapping durable: msync(MS_SYNC) of their pages.

    ``mmap.flush()`` holds the GIL through the whole msync, disk write included, and without a range it
    walks the whole mapping: measured here, a thread calling it in a loop left another Python thread 3 % of
    its speed and stalls of up to 0.5 s, so the journal's syncs stalled the node's event loop (HTTP) and
    its Raft thread alike. msync through ctypes runs without the GIL, on the written pages only.

    Without the GIL, nothing stops another thread from resizing or closing the mapping during the call: the
    journal's mapping changes only on the Raft thread, which is the one that syncs it. Keep it that way."""
    if offset < 0 or size < 0 or offset + size > len(mm):
        raise ValueError(f"range [{offset}, {offset + size}) is not inside the {len(mm)}-byte mapping")
    start = offset - offset % mmap.PAGESIZE
    length = offset + size - start
    if _msync is None:
        mm.flush(start, length)
        return
    view = ctypes.c_char.from_buffer(mm)
    address = ctypes.addressof(view)
    del view  # no buffer export may outlive this call: the journal resizes its mapping
    if _msync(address + start, length, _MS_SYNC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"msync of the Raft journal: {os.strerror(err)}")


class JournalFull(OSError):
    """No room on disk for the next journal entry; nothing was written."""


class _CheckedJournal(FileJournal):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's mmap file journal with checks, ordered writes and room reserved before writing.

    - **Detection at start** (``read_journal``): a truncated or damaged journal, or a damaged ``.meta``
      (term and vote; pysyncobj reads a bad one as "term 0, no vote"), stops the node with
      ``CorruptState`` instead of being served or silently shortened.
    - **The rule for torn writes**: an append writes the entry, syncs it, and only then moves the
      header's end over it and syncs again. So an entry inside the end was durable before anything could
      acknowledge it, and a crash mid-append leaves at most bytes *past* the end: an entry never
      acknowledged (the follower answers the leader, the leader counts itself, only after ``add`` returns),
      dropped exactly as pysyncobj does. Damage inside the end is therefore never a torn write: it is
      corruption, and the node refuses to start. (With ``--no-journal-fsync`` there are no syncs: a power
      loss can tear the tail, which is then reported the same way; kill -9 cannot, the page cache survives.)
    - **Compaction is atomic**: pysyncobj rewrites the kept entries in place after a dump (clear, then
      re-add), so a crash in between loses them; here the new journal is written aside and renamed over.
    - **Disk full**: the file's blocks are reserved (``posix_fallocate``) before an entry is written, so a
      full disk (or a file size limit) raises ``JournalFull`` before any byte changes, instead of a SIGBUS
      on the mmap or a half-written entry. The entry is then not in the log; the node stays consistent.
    - Legacy journals (pysyncobj's format, no checksums) are checked as far as their framing allows and
      rewritten in this format, atomically, at open.
    """

    # pysyncobj's privates this class works on (name-mangled in FileJournal; pinned 0.3.17)
    _FileJournal__journal: list[tuple[bytes, int, int]]
    _FileJournal__currentOffset: int
    _FileJournal__journalFile: Any

    def __init__(self, path: str, fsync: bool) -> None:
        self._path = Path(path)
        self._fsync = fsync
        if self._path.exists():
            fmt, entries = read_journal(self._path)
            if fmt == _LEGACY_FORMAT:
                log.info("journal %s: rewriting %d entries with checksums", path, len(entries))
                _write_journal_file(self._path, entries)
        else:
            _write_journal_file(self._path, [])
        super().__init__(path)
        # pysyncobj's loader kept each command with our checksum in front: drop it (checked above).
        self._FileJournal__journal = [(c[4:], i, t) for c, i, t in self._FileJournal__journal]
        meta_path = self._FileJournal__metaStorer.getPath()
        if not self._FileJournal__meta and os.path.exists(meta_path) and os.path.getsize(meta_path) > 0:
            raise CorruptState(
                f"{meta_path}: the Raft term and vote do not decode. Refusing to start: a node that forgot its "
                "vote could vote twice in one term; wipe this node's data dir so that it catches up"
            )
        self._allocated = 0
        self._reserve(self._file().size())

    def _file(self) -> Any:
        return self._FileJournal__journalFile._ResizableFile__mm

    def _reserve(self, size: int) -> None:
        """Allocate the file's blocks up to ``size`` bytes (mmap writes into holes SIGBUS on a full disk)."""
        if size <= self._allocated:
            return
        f = self._FileJournal__journalFile._ResizableFile__f
        for want in (max(size, 2 * self._allocated), size):  # grow by doubling when there is room
            try:
                os.posix_fallocate(f.fileno(), 0, want)
            except OSError as e:
                error = e
                continue
            mm = self._file()
            if len(mm) < want:  # map what was allocated (pysyncobj sizes its writes by the file's size)
                mm.resize(want)
            self._allocated = want
            return
        raise JournalFull(error.errno, f"no room for the Raft journal ({self._path}): {error.strerror}")

    def room_for(self, command_bytes: int) -> bool:
        """Whether the disk can take an entry of this size now (read-only: safe off the Raft thread)."""
        needed = self._FileJournal__currentOffset + command_bytes + 28 - self._allocated
        if needed <= 0:
            return True
        st = os.statvfs(self._path.parent)
        return bool(st.f_bavail * st.f_frsize >= max(needed, 2 * self._allocated) + DISK_HEADROOM_BYTES)

    def _sync(self, offset: int = 0, size: int = _HEADER_SIZE) -> None:
        """Make ``size`` bytes at ``offset`` durable (by default the header, where the end of the log is)."""
        if self._fsync:
            sync_range(self._file(), offset, size)

    def add(self, command: bytes, idx: int, term: int) -> None:
        self.add_entries(((command, idx, term),))

    def add_entries(self, entries: Sequence[tuple[bytes, int, int]]) -> None:
        """Append consecutive entries with two syncs in all (the entries, then the header's end over them)
        instead of two per entry: a follower receives many entries per ``append_entries`` and answers once,
        after this returns, so every entry it acknowledges is still durable before the reply. All or none:
        room for the whole batch is reserved before any byte is written."""
        if not entries:
            return
        data = b"".join(_encode_entry(*e) for e in entries)
        start = self._FileJournal__currentOffset
        self._reserve(start + len(data))
        journal_file = self._FileJournal__journalFile
        journal_file.write(start, data)
        self._sync(start, len(data))  # the entries are durable before the header covers them
        self._FileJournal__journal.extend(entries)
        self._FileJournal__currentOffset = start + len(data)
        journal_file.write(_END_FIELD, struct.pack("<I", start + len(data)))
        self._sync()

    def deleteEntriesTo(self, entryTo: int) -> None:
        kept = self._FileJournal__journal[entryTo:]
        self._FileJournal__journalFile._destroy()
        _write_journal_file(self._path, kept)
        self._FileJournal__journalFile = pso_journal.ResizableFile(str(self._path))
        self._FileJournal__journal = list(kept)
        self._FileJournal__currentOffset = _HEADER_SIZE + sum(28 + len(c) for c, _, _ in kept)
        self._allocated = 0
        self._reserve(self._file().size())

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # only moves the header's end back: atomic
        super().deleteEntriesFrom(entryFrom)
        self._sync()

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        super().setCurrentTerm(term, votedForNodeId)  # Raft: term + vote durable before any vote is sent
        if self._fsync:  # pysyncobj writes <meta>.tmp and renames it: sync the file, then its rename
            meta_path = self._FileJournal__metaStorer.getPath()
            _fsync_path(meta_path)
            _fsync_path(os.path.dirname(meta_path) or ".")


def finish_compaction(path: Path, prev: Sequence[Any], last: Sequence[Any]) -> bool:
    """Drop the journal entries before a dump's ``prev`` entry if a crash left them there; True if it did.

    pysyncobj truncates the journal to start at the dump's (prev, last) entries only on the tick after the
    dump is durable. A node killed in between restarts with the new dump and the old journal, and
    pysyncobj, finding that the journal does not start with (prev, last), *clears* it: every entry after
    the dump, acknowledged ones included, is gone from that node. This finishes the truncation instead
    (atomically, as ``_CheckedJournal.deleteEntriesTo`` does), so that pysyncobj finds what it expects.
    """
    if not path.exists():
        return False
    _fmt, entries = read_journal(path)
    want = [(bytes(prev[0]), int(prev[1]), int(prev[2])), (bytes(last[0]), int(last[1]), int(last[2]))]
    first = next((i for i, e in enumerate(entries) if e[1] == want[0][1]), None)
    if not first or entries[first : first + 2] != want:  # already finished (0), or not this dump's entries
        return False
    log.info("journal %s: dropping %d entries the dump already covers (compaction interrupted)", path, first)
    _write_journal_file(path, entries[first:])
    return True


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_journal_fsync = threading.local()


def _create_journal(journal_file: str | None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return _CheckedJournal(journal_file, fsync=getattr(_journal_fsync, "on", False))


class _ThreadedDumpWriter(Serializer):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's full-dump Serializer, made asynchronous with a thread instead of its fork().

    ``serialize`` runs on the Raft thread and only calls our capture function (an immutable image
    reference and a copy of the keys); a writer thread encodes it, writes ``<dump>.tmp``, fsyncs it,
    renames it over the dump and fsyncs the directory. Until then ``checkSerializing`` answers
    SERIALIZING, so pysyncobj truncates its journal only once the new dump is durable. Encoding a
    1M-partition image takes seconds: done on the Raft thread, it would cost the leader its leadership.
    Reading and transmitting the dump to a lagging follower stay pysyncobj's own code.
    """

    def __init__(self, file_name: str, batch_size: int, try_use_fork: bool, capture: Any, deserializer: Any,
                 checker: Any) -> None:  # fmt: skip
        super().__init__(file_name, batch_size, False, capture, deserializer, checker)
        self._file_name = file_name
        self._capture = capture
        self._writer: threading.Thread | None = None
        self._written_ok = False
        self._dump_id: Any = None

    def serialize(self, data: Any, dump_id: Any) -> None:
        if self._writer is not None:
            return
        started = time.monotonic()
        encode = self._capture(data[1:])
        log.debug("state captured for a dump in %.1f ms", (time.monotonic() - started) * 1000)
        self._dump_id = dump_id
        self._writer = threading.Thread(target=self._write, args=(encode,), name="kfed-dump", daemon=True)
        self._writer.start()

    def _write(self, encode: Callable[[], bytes]) -> None:
        started = time.monotonic()
        tmp = self._file_name + ".tmp"
        try:
            data = encode()
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._file_name)
            _fsync_path(os.path.dirname(self._file_name) or ".")
            self._written_ok = True
            log.info("dump of %d bytes written in %.2f s", len(data), time.monotonic() - started)
        except Exception:
            log.exception("writing the state dump failed; the journal is kept")
            self._written_ok = False
            with contextlib.suppress(OSError):  # e.g. a half-written dump on a full disk
                os.unlink(tmp)

    def checkSerializing(self) -> tuple[int, Any]:
        if self._writer is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if self._writer.is_alive():
            return SERIALIZER_STATE.SERIALIZING, self._dump_id
        self._writer = None
        return (SERIALIZER_STATE.SUCCESS if self._written_ok else SERIALIZER_STATE.FAILED), self._dump_id


# SyncObj builds its journal and its dump serializer through these module-level names; route them
# through ours (pysyncobj is pinned to 0.3.17; tests/unit/test_raft.py checks the names exist).
_pso.createJournal = _create_journal
_pso.Serializer = _ThreadedDumpWriter


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # leader / follower / candidate
    term: int
    leader_raft: str | None  # "host:port" of the leader as this node sees it
    stalls: int = 0  # Raft ticks that could not listen for STALL_GUARD_MS beyond their wait (see excuse_stall)


class RaftNode:
    """One voter of the metadata quorum. Construct it in the main thread (pysyncobj's tick thread dies
    with the thread that built it), one per process, and never fork afterwards."""

    def __init__(
        self,
        self_raft: str,
        peers_raft: Sequence[str],
        data_dir: Path,
        state: LogState,
        settings: RaftSettings | None = None,
    ) -> None:
        self.state = state
        self.settings = settings or RaftSettings()
        self.data_dir = data_dir
        self.self_raft = self_raft
        self._role = "follower"
        # Proposals not yet settled by pysyncobj, so they can be answered if leadership is lost.
        self._pending_lock = threading.Lock()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Outcome]]]] = {}
        self._next_pending = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        self._loaded_raft_internal = self._validate_dump(data_dir / "raft.dump")
        if self._loaded_raft_internal is not None:
            internal = self._loaded_raft_internal
            finish_compaction(data_dir / "raft.journal", internal["prev"], internal["last"])
        _journal_fsync.on = self.settings.journal_fsync
        pso_tcp.zlib = _WireZlib(self.settings.wire_compression)
        # pysyncobj pickles commands, messages and entries with protocol 2, which has no bytes type: a command
        # travels as a latin-1 str, 1.3-2.5x its size, and (un)pickling 16 KB costs ~400 us instead of ~5 us,
        # on every node, for every command, several times. Protocol 4 pickles bytes as bytes; any node
        # unpickles both, so nodes and journals of either kind mix.
        pso_pickle.__dict__["__protocol"] = PICKLE_PROTOCOL
        try:
            self._conf = self.settings.conf(data_dir, self)
            self._syncobj = _Replica(self_raft, list(peers_raft), self._conf, self)
        finally:
            _journal_fsync.on = False

    # -- durable state ----------------------------------------------------------------------------
    def _validate_dump(self, path: Path) -> Any:
        """Load and check the dump before pysyncobj does (it swallows errors and starts empty)."""
        if not path.exists():
            return None
        data = path.read_bytes()
        try:
            internal = self.state.load(data)
        except CorruptState as e:
            raise CorruptState(f"{path}: {e}. Refusing to start; restore the file or wipe the data dir.") from e
        log.info("loaded dump %s at offset %d (%d bytes)", path, self.state.image.offset, len(data))
        return internal

    def _capture(self, internal: Any) -> Callable[[], bytes]:
        """On the Raft thread: our state + pysyncobj's (last entry, previous entry, cluster), frozen."""
        last_entry, prev_entry, cluster = internal
        raft_internal = {
            "last": list(last_entry),
            "prev": list(prev_entry),
            "cluster": sorted(n.address for n in cluster),
        }
        return self.state.capture(raft_internal)

    def _deserialize(self, file_name: str) -> tuple[Any, Any, Any]:
        """pysyncobj's custom deserializer: the state was loaded (and checked) before start."""
        internal = self._loaded_raft_internal
        if internal is None:  # a dump received from the leader (InstallSnapshot) since start
            internal = self.state.load(Path(file_name).read_bytes())
        self._loaded_raft_internal = None
        last, prev = internal["last"], internal["prev"]
        cluster = {TCPNode(a) for a in internal["cluster"]}
        return (tuple(last), tuple(prev), cluster)

    def _on_state_changed(self, old: int, new: int) -> None:
        was_leader = self._role == "leader"
        self._role = {0: "follower", 1: "candidate", 2: "leader"}.get(new, "unknown")
        log.info("raft role -> %s", self._role)
        if was_leader and self._role != "leader":
            # pysyncobj settles a deposed leader's pending commands only when later entries apply, which
            # without a new leader is never: answer them now (they may still commit; retries are keyed).
            with self._pending_lock:
                pending, self._pending = self._pending, {}
            for loop, future in pending.values():
                hand_over(
                    loop,
                    _fail,
                    future,
                    OutcomeUnknown(
                        "leadership was lost before the commit was confirmed; retry with the same Idempotency-Key"
                    ),
                )

    # -- membership -------------------------------------------------------------------------------
    def change_membership(self, action: str, raft: str) -> asyncio.Future[None]:
        """Add (``"add"``) or remove (``"remove"``) one voter through the Raft log; resolves when committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(result: Any, error: int) -> None:  # on the Raft thread
            hand_over(loop, _settle, future, None, error)

        if action == "add":
            self._syncobj.addNodeToCluster(raft, callback=done)
        else:
            self._syncobj.removeNodeFromCluster(raft, callback=done)
        return future

    def transfer_leadership(self) -> None:
        """Ask the most caught-up follower to take over (best effort; used before removing the leader)."""
        self._syncobj.transferLeadership(None, callback=lambda result, error: None)

    def voters(self) -> list[str]:
        """Raft addresses of the current voters, this node included, as this node's log has them."""
        others = self._syncobj.otherNodes  # a set pysyncobj replaces, never mutates in place
        return sorted({self.self_raft} | {n.address for n in others})

    def hold_elections_until_led(self) -> None:
        """A node joining a running quorum must not campaign before the leader has added it: its failed
        elections would raise its term and depose the leader the moment it is added."""
        conf = self._conf
        normal = (conf.raftMinTimeout, conf.raftMaxTimeout)
        conf.raftMinTimeout, conf.raftMaxTimeout = 3600.0, 3601.0
        self._syncobj._SyncObj__raftElectionDeadline = pysyncobj_clock() + 3600.0

        def restore() -> None:
            while self._syncobj._getLeader() is None:
                time.sleep(0.05)
            conf.raftMinTimeout, conf.raftMaxTimeout = normal
            log.info("joined: following leader %s", self._syncobj._getLeader().address)

        threading.Thread(target=restore, name="join-wait", daemon=True).start()

    # -- proposing --------------------------------------------------------------------------------
    def propose(self, proposals: Sequence[Proposal]) -> asyncio.Future[list[Outcome]]:
        """Replicate one command carrying ``proposals``; the future resolves on the calling loop.

        Raises (through the future) ``Unavailable`` when the command certainly did not commit and
        ``OutcomeUnknown`` when it may have. Callers add their own timeout.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Outcome]] = loop.create_future()
        data = self.state.encode_proposal(proposals)
        journal = self._syncobj._SyncObj__raftLog
        if isinstance(journal, _CheckedJournal) and not journal.room_for(len(data) + 64):
            # Refuse before proposing: a leader whose journal append fails (JournalFull) drops the command
            # without answering, so the client would only learn "outcome unknown" after the commit timeout.
            future.set_exception(Unavailable(f"disk full: no room for the Raft journal in {self.data_dir}"))
            return future
        with self._pending_lock:
            self._next_pending += 1
            pending_id = self._next_pending
            self._pending[pending_id] = (loop, future)

        def done(result: Any, error: int) -> None:  # on the Raft thread: never block here
            with self._pending_lock:
                self._pending.pop(pending_id, None)
            hand_over(loop, _settle, future, result, error)

        self._syncobj.apply_command(data, callback=done)
        return future

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> RaftStatus:
        s = self._syncobj
        leader = s._getLeader()
        return RaftStatus(
            role=self._role,
            term=int(s.raftCurrentTerm),
            leader_raft=leader.address if leader is not None else None,
            stalls=s.kfed_stalls,
        )

    def alive(self) -> bool:
        """The tick thread runs (it dies with the thread that built the node)."""
        return bool(self._syncobj.tick_thread_alive())

    def caught_up(self) -> bool:
        """pysyncobj's readiness: the node has applied everything the leader had committed when it met it."""
        return bool(self._syncobj.isReady())

    def is_leader(self) -> bool:
        """The role pysyncobj last reported (onStateChanged): cheap enough for every request."""
        return self._role == "leader"

    def force_compaction(self) -> None:
        self._syncobj.forceLogCompaction()

    def close(self) -> None:
        self._syncobj.destroy()


def _fail(future: asyncio.Future[list[Outcome]], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


def hand_over(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop``, from the Raft thread: in order with every other call handed to
    that loop, never blocking. A loop that is already closed has nobody left waiting (the process is
    shutting down): the call is dropped instead of raising inside pysyncobj's tick, which logged it as a
    failed tick."""
    mailbox = _MAILBOXES.get(loop)
    if mailbox is None:
        with _MAILBOXES_LOCK:
            mailbox = _MAILBOXES.setdefault(loop, _Mailbox())
    try:
        mailbox.post(loop, callback, args)
    except RuntimeError:
        if not loop.is_closed():
            raise


class _Mailbox:
    """The calls handed over to one event loop, which is woken once per burst of them.

    pysyncobj settles a tick's commands one after another (and each command publishes to the read model
    first), and a ``call_soon_threadsafe`` per call wrote to the loop's self-pipe each time: a tenth of a
    busy leader's CPU (BENCHMARKS.md, tenth session). Here only the first call of a burst wakes the loop;
    ``_run`` takes every call posted until it finds none left."""

    def __init__(self) -> None:
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._woken = False

    def post(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._calls.append((callback, args))
        if not self._woken:
            self._woken = True
            loop.call_soon_threadsafe(self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        # Cleared before taking the calls: one posted after the last is taken finds it cleared and wakes
        # the loop again (at worst once too often, never too few: posters only ever append).
        self._woken = False
        calls = self._calls
        while calls:
            callback, args = calls.popleft()
            try:
                callback(*args)
            except Exception as e:  # as the loop itself reports a failed callback, and go on with the rest
                loop.call_exception_handler({"message": f"exception in {callback!r}", "exception": e})


_MAILBOXES: Final[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox]] = weakref.WeakKeyDictionary()
_MAILBOXES_LOCK: Final = threading.Lock()


def _settle(future: asyncio.Future[Any], result: Any, error: int) -> None:
    if future.done():
        return
    if error == FAIL_REASON.SUCCESS:
        future.set_result(result)
    elif error in (
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.QUEUE_FULL,
        FAIL_REASON.REQUEST_DENIED,
    ):
        future.set_exception(Unavailable(f"not committed: {_FAIL_NAMES.get(error, error)}", retry_after_s=0.5))
    else:  # DISCARDED, LEADER_CHANGED, UNKNOWN_OUTCOME: the entry may still commit
        future.set_exception(
            OutcomeUnknown(
                f"commit outcome unknown ({_FAIL_NAMES.get(error, error)}); retry with the same Idempotency-Key"
            )
        )


_FAIL_NAMES: Final = {v: k for k, v in vars(FAIL_REASON).items() if isinstance(v, int)}


def guard_snapshot_commit(message: Any, own_commit_index: int) -> Any:
    """Keep a snapshot message from committing the follower's own, unchecked log entries.

    pysyncobj 0.3.17 handles an ``append_entries`` that carries a snapshot chunk (no ``prevLogIdx``) by
    raising the follower's commit index to ``min(leader's commit, its own last index)`` without having
    checked its log against the leader's. A deposed leader that appended entries nobody else has (while
    cut off) then *applies* them when the new leader starts sending it a snapshot: records that were never
    committed are served for a moment, until the snapshot replaces the state (found by the fault harness,
    ``make faults SEED=2 DURATION=90``: a tailer read from the healed node a record at an offset that
    the quorum had committed differently). Such messages may not raise the commit index: the snapshot
    itself, and the regular appends after it, bring the real one.
    """
    if isinstance(message, dict) and message.get("type") == "append_entries" and "prevLogIdx" not in message:
        commit = message.get("commit_index")
        if isinstance(commit, int) and commit > own_commit_index:
            return {**message, "commit_index": own_commit_index}
    return message


Entry = tuple[bytes, int, int]  # pysyncobj's log entry: (command, Raft index, term)


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What a follower does with the entries of an ``append_entries`` whose ``prevLogIdx``/``prevLogTerm``
    matched its log (Raft, Figure 2, AppendEntries receiver steps 3-5)."""

    truncate_from: int | None  # first index where the follower's entry conflicts (other term); None: none does
    append: Sequence[Entry]  # the message's entries the follower does not hold yet, in order
    verified: int  # last index this message proves equal to the leader's log: prevLogIdx + len(entries)


def plan_append(term_at: Callable[[int], int | None], prev_idx: int, entries: Sequence[Entry]) -> AppendPlan:
    """Raft's follower rule, given the follower's term at an index (``None`` past its last entry).

    "If an existing entry conflicts with a new one (same index but different terms), delete the existing
    entry and all that follow it; append any new entries not already in the log." An entry that matches
    is never deleted, so a late, repeated or reordered ``append_entries`` (one that carries fewer entries
    than the follower already holds) cannot remove entries it acknowledged; and only ``verified`` may
    bound the commit index: entries the follower holds past it were not checked by this message.
    """
    for i, (_command, idx, term) in enumerate(entries):
        ours = term_at(idx)
        if ours is None:
            return AppendPlan(None, entries[i:], prev_idx + len(entries))
        if ours != term:
            return AppendPlan(idx, entries[i:], prev_idx + len(entries))
    return AppendPlan(None, (), prev_idx + len(entries))


def stale_reply(message: Any, current_term: int) -> bool:
    """A follower's ``next_node_idx`` answers an ``append_entries`` of one term (``_Replica`` stamps it):
    a leader may count it only in that term. pysyncobj's replies carry no term, so an answer delayed past
    an election (a paused follower answering the node's previous leadership) would set the match index of
    the node's new leadership from a log that may since have changed. Unstamped replies (an older kfed)
    are taken as before."""
    if not isinstance(message, dict) or message.get("type") != "next_node_idx":
        return False
    term = message.get("term")
    return isinstance(term, int) and term != current_term


def is_progress_reply(message: dict[str, Any]) -> bool:
    """A follower's success answer to an ``append_entries``: it moves the match index up, and it must not
    move the next index back. Entries sent after the answered message are in flight on the same TCP
    connection; a follower that misses some (a new connection) answers with ``reset``, which does."""
    return message.get("type") == "next_node_idx" and message.get("success") is True and not message.get("reset")


class PreVote:
    """The Raft pre-vote (Ongaro's thesis, 9.6), which pysyncobj lacks.

    Without it a node that missed its leader's heartbeats for its own reasons (a wiped follower replaying
    the log, a process that stalled) raises the term when it campaigns, and the healthy leader steps down
    on seeing it: a 1M-partition catch-up caused a dozen elections. With it, a node whose election
    timeout expired first sends ``kfed_pre_vote`` for the next term. A peer agrees only if it has not heard
    from a leader for its configured minimum election timeout and the asker's log is at least as up to date
    as its own; nobody's term changes. Terms are not compared: a node whose term lags but whose log holds
    the last committed entry must still be electable (its real elections then raise its term, as without
    pre-vote). Only with a majority does the node run pysyncobj's election, and a leader heard meanwhile
    cancels the round. A leadership transfer (``timeout_now``) campaigns at once, as before.
    """

    REQUEST: Final = "kfed_pre_vote"
    REPLY: Final = "kfed_pre_vote_reply"

    def __init__(self) -> None:
        self.term: int | None = None  # the term of the round this node runs, if any
        self.granted: set[Any] = set()
        self.won = False  # a majority agreed: campaign on the next tick

    def start(self, term: int | None) -> None:
        """A new round for ``term``; None ends any round (a leader was heard, or the node campaigns)."""
        self.term, self.granted, self.won = term, set(), False

    def cancel(self) -> None:
        """End the round, if one runs (called for every heartbeat: nothing is built when none does)."""
        if self.term is not None:
            self.start(None)

    def answer(self, granted_by: Any, term: int, granted: bool, voters: int) -> None:
        if term != self.term or not granted or self.won:
            return
        self.granted.add(granted_by)
        self.won = len(self.granted) + 1 > voters / 2  # + 1: its own

    @staticmethod
    def agree(asked_log: tuple[int, int], own_log: tuple[int, int], leader_heard_s: float, min_timeout_s: float,
              is_leader: bool) -> bool:  # fmt: skip
        """Would this node vote for the asker? ``*_log`` are (last term, last index)."""
        return not is_leader and leader_heard_s >= min_timeout_s and asked_log >= own_log


@dataclass(frozen=True, slots=True)
class TickMark:
    """What a Raft tick started with: when, how long its socket poll may wait, and the peers' clocks."""

    started: float
    wait_s: float
    election_deadline: float
    last_replies: dict[Any, float]


def excuse_stall(replica: _Replica, mark: TickMark, now: float) -> bool:
    """After a tick that took longer than its poll wait plus ``STALL_GUARD_MS`` (see ``_Replica._onTick``),
    move on by the excess the election deadline and the leader's last-reply times that nothing refreshed
    since ``mark`` (never past ``now``); True if it was a stall."""
    stalled = now - mark.started - mark.wait_s
    if stalled <= STALL_GUARD_MS / 1000:
        return False
    replica.kfed_stalls += 1
    if replica._SyncObj__raftElectionDeadline == mark.election_deadline:
        replica._SyncObj__raftElectionDeadline += stalled
    heard = replica._SyncObj__lastResponseTime
    for peer, at in heard.items():
        if mark.last_replies.get(peer) == at:
            heard[peer] = min(now, at + stalled)
    if stalled > 0.2:
        log.info("raft tick stalled %.0f ms; the peers' silence during it is not counted", stalled * 1000)
    return True


class _Replica(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """The pysyncobj object. Its single replicated method is the whole state machine.

    It also replaces pysyncobj's follower handling of a regular ``append_entries`` (see
    ``_kfed_append_entries``) and stamps the follower's replies with its term. pysyncobj's private names are
    reached by their mangled form (``_SyncObj__...``); pysyncobj is pinned to 0.3.17 and
    ``tests/unit/test_raft.py`` checks that every name used here exists.
    """

    # pysyncobj's privates this class works on (name-mangled in SyncObj; pinned 0.3.17)
    _SyncObj__raftLog: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__raftNextIndex: dict[Any, int]
    _SyncObj__raftCurrentTerm: int
    _SyncObj__raftLastApplied: int
    _SyncObj__leaderCommitIndex: int | None
    _SyncObj__recvTransmission: Any
    _SyncObj__transport: Any
    _SyncObj__raftElectionDeadline: float
    _SyncObj__lastResponseTime: dict[Any, float]
    _SyncObj__raftState: int
    _SyncObj__transferInProgress: bool
    _SyncObj__commandsQueue: Any
    _SyncObj__pipeNotifier: Any

    def __init__(self, self_raft: str, peers: list[str], conf: SyncObjConf, node: RaftNode) -> None:
        self._kfed_state = node.state
        self._kfed_node = node
        # (term, index): the highest index this node has told that term's leader it holds (diagnostics only)
        self._kfed_acknowledged = (-1, 0)
        self._kfed_tick: TickMark | None = None  # how the last tick started
        self._kfed_pre_vote = PreVote()
        self._kfed_leader_heard = pysyncobj_clock()  # when an append_entries of a current leader came
        self.kfed_stalls = 0  # ticks that took STALL_GUARD_MS longer than their socket wait (/metrics)
        self._kfed_wake_sent = False  # the Raft thread was woken for the commands queued (``_applyCommand``)
        super().__init__(self_raft, peers, conf)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj's tick, after taking out the time the last tick could not listen.

        A tick checks the election deadline (follower) and the peers' last replies (leader, CheckQuorum)
        first, then does its work (applying committed entries, sending), and reads its sockets last, for at
        most ``timeToWait``. When the previous tick took longer than that wait (a catch-up backlog of
        applies, the GIL held by a garbage collection, a dump or a big decode), heartbeats and replies may
        still wait unread while the clock says the peers were silent: a follower would start an election and
        depose a healthy leader, a leader would step down. So the excess moves on whichever of those clocks
        nothing refreshed meanwhile; a peer that is really silent is noticed that much later.
        """
        now = pysyncobj_clock()
        if self._kfed_tick is not None:
            excuse_stall(self, self._kfed_tick, now)
        self._pre_vote(now)
        self._kfed_tick = TickMark(
            now, timeToWait, self._SyncObj__raftElectionDeadline, dict(self._SyncObj__lastResponseTime)
        )
        SyncObj._onTick(self, timeToWait)

    def _pre_vote(self, now: float) -> None:
        """Before pysyncobj's tick would campaign (see ``PreVote``): ask first, or let it if a majority agreed."""
        if (
            self._SyncObj__raftState == _pso._RAFT_STATE.LEADER
            # pysyncobj reads its clock again a moment later: a deadline falling in between is taken as
            # expired here, so it never campaigns without asking first
            or self._SyncObj__raftElectionDeadline >= now + PRE_VOTE_CLOCK_MARGIN_S
            or self._SyncObj__transferInProgress
            or not self.otherNodes
            or self.selfNode is None
        ):
            return
        if self._kfed_pre_vote.won:
            self._kfed_pre_vote.start(None)  # campaign now; a later timeout asks again
            self._SyncObj__raftElectionDeadline = 0  # also when it was within the margin: pysyncobj must see it
            return
        term = self._SyncObj__raftCurrentTerm + 1
        self._kfed_pre_vote.start(term)
        own_log = [self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex()]
        for peer in self.otherNodes:
            self._SyncObj__transport.send(peer, {"type": PreVote.REQUEST, "term": term, "log": own_log})
        # no answer in an election timeout: ask again then
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()

    def _on_pre_vote_message(self, node: Any, message: dict[str, Any]) -> None:
        if message["type"] == PreVote.REQUEST:
            asked_log = message.get("log") or [0, 0]
            granted = PreVote.agree(
                (int(asked_log[0]), int(asked_log[1])),
                (self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex()),
                pysyncobj_clock() - self._kfed_leader_heard,
                # the configured timeout: a joining node's conf holds a much longer one while it waits
                # to be led (``hold_elections_until_led``), and must not refuse everyone meanwhile
                self._kfed_node.settings.election_timeout_ms_min / 1000,
                self._SyncObj__raftState == _pso._RAFT_STATE.LEADER,
            )
            self._SyncObj__transport.send(node, {"type": PreVote.REPLY, "term": message["term"], "granted": granted})
            return
        if node not in self.otherNodes:
            return  # not a voter (any more)
        self._kfed_pre_vote.answer(node, message["term"], bool(message.get("granted")), len(self.otherNodes) + 1)
        if self._kfed_pre_vote.won:
            self._SyncObj__raftElectionDeadline = 0  # the next tick campaigns

    # SyncObj's transport callback is bound in SyncObj.__init__ as ``self.__onMessageReceived``, i.e. this
    # name: every Raft message, from the first one, comes through here.
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        if isinstance(message, dict):
            kind = message.get("type")
            if kind in (PreVote.REQUEST, PreVote.REPLY):
                self._on_pre_vote_message(node, message)
                return
            if kind == "append_entries" and message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
                self._kfed_leader_heard = pysyncobj_clock()
                self._kfed_pre_vote.cancel()  # a leader is there: a round won before it must not campaign
            if kind == "append_entries" and "prevLogIdx" in message:
                if self._kfed_append_entries(node, message):
                    return
            elif stale_reply(message, self._SyncObj__raftCurrentTerm):
                return
            elif is_progress_reply(message):
                sent_up_to = self._SyncObj__raftNextIndex.get(node)
                SyncObj._SyncObj__onMessageReceived(self, node, message)
                # pysyncobj sets the next index from every success, also to below what it already sent:
                # then it sends those entries again (3x the bytes under bulk writes). Keep it where it was.
                if sent_up_to is not None and self._SyncObj__raftNextIndex.get(node, sent_up_to) < sent_up_to:
                    self._SyncObj__raftNextIndex[node] = sent_up_to
                return
            else:
                message = guard_snapshot_commit(message, self._SyncObj__raftCommitIndex)
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _SyncObj__sendNextNodeIdx(
        self, node: Any, reset: bool = False, nextNodeIdx: int | None = None, success: bool = False
    ) -> None:
        """pysyncobj's follower reply, stamped with the term it answers (see ``stale_reply``)."""
        if nextNodeIdx is None:
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        self._SyncObj__transport.send(node, {
            "type": "next_node_idx", "next_node_idx": nextNodeIdx, "reset": reset, "success": success,
            "term": self._SyncObj__raftCurrentTerm,
        })  # fmt: skip

    def _kfed_append_entries(self, node: Any, message: dict[str, Any]) -> bool:
        """A regular ``append_entries`` (with ``prevLogIdx``), handled by Raft's rule; False: left to pysyncobj.

        pysyncobj 0.3.17, once ``prevLogIdx``/``prevLogTerm`` match, deletes *every* entry after
        ``prevLogIdx`` and appends the message's entries again. A leader re-sends from an older index after
        every late "reset" answer (its "CRITICAL truncating already-applied log entries", 20-116 times per
        fault run, is this on entries already applied), so followers routinely delete entries they had
        acknowledged and re-append them one synced write at a time (~0.5 ms each here): for that long the
        journal on disk is shorter than what the leader counted, and a kill -9 then (``restart_all``) makes
        it so for good; a message carrying fewer entries than the follower holds removes them outright. A
        committed entry then sits on a minority, a node without it can win the election, and it is lost
        (``make faults SEED=4 DURATION=60``), while nodes that had applied it serve a record the new log
        does not have (``SEED=3``). Here the follower keeps every matching entry, deletes only from the
        first conflicting one, appends only what it lacks, and raises its commit index only up to
        ``min(leader's commit, last index this message verified)``.

        Everything else an accepted ``append_entries`` does (election deadline, leader, term, follower
        state, leadership-transfer rules) stays pysyncobj's: it is given the same message without log
        entries, ``prevLogIdx`` or a commit index beyond its own, which touches neither log nor commit.
        """
        term = message["term"]
        transmission = message.get("transmission")
        if term < self._SyncObj__raftCurrentTerm or transmission not in (None, "finish"):
            return False  # a stale leader's (ignored), or a chunk of a big entry (only buffered and answered)
        entries: Sequence[Entry] = message.get("entries", [])
        if transmission == "finish":  # the last chunk of one entry too big for a single message
            entries = [pso_pickle.loads(self._SyncObj__recvTransmission + message["data"])]
            self._SyncObj__recvTransmission = ""
        SyncObj._SyncObj__onMessageReceived(
            self, node, {"type": "append_entries", "term": term, "commit_index": self._SyncObj__raftCommitIndex}
        )
        self._SyncObj__leaderCommitIndex = leader_commit = message["commit_index"]

        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        prev = self._SyncObj__getEntries(prev_idx, 1)
        if not prev:  # not in the log (past its end, or below the dump): "send from my end"
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return True
        if prev[0][2] != prev_term:  # Raft step 2: the log does not contain prevLogIdx with prevLogTerm
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_idx, success=False, reset=True)
            return True

        def term_at(idx: int) -> int | None:
            found = self._SyncObj__getEntries(idx, 1)
            return int(found[0][2]) if found else None

        plan = plan_append(term_at, prev_idx, entries)
        last = self._SyncObj__getCurrentLogIndex()
        if plan.truncate_from is None and plan.verified < last:
            self._note_kept_entries(term, plan.verified, last, prev_idx)
        membership = self._SyncObj__conf.dynamicMembershipChange
        if plan.truncate_from is not None:  # Raft step 3: a conflicting entry and all that follow it
            removed = self._SyncObj__getEntries(plan.truncate_from)
            if membership:  # undo the membership changes they carried (pysyncobj applies them on append)
                for entry in reversed(removed):
                    change = self._SyncObj__parseChangeClusterRequest(entry[0])
                    if change is not None:
                        self._SyncObj__doChangeCluster(change, reverse=True)
            if plan.truncate_from <= self._SyncObj__raftLastApplied:
                # Cannot happen in Raft (an applied entry is committed, and a leader holds every committed
                # entry); kept as pysyncobj's loud signal that the state machine has diverged.
                log.critical(
                    "a conflicting append_entries truncates applied entries from index %d (last applied %d): "
                    "this node's state has diverged from the quorum; wipe its data dir",
                    plan.truncate_from,
                    self._SyncObj__raftLastApplied,
                )
            self._SyncObj__deleteEntriesFrom(plan.truncate_from)
        journal = self._SyncObj__raftLog  # Raft step 4: the entries not already in the log (journal-synced)
        if isinstance(journal, _CheckedJournal):
            journal.add_entries(plan.append)  # one sync for the whole message, before the reply below
        else:
            for entry in plan.append:
                journal.add(*entry)
        if membership:
            for entry in plan.append:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)

        # Answered only once the entries are durable (``_CheckedJournal.add`` syncs before returning), and
        # only for what this message verified: entries held past it are not claimed.
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=plan.verified + 1, success=True)
        if self._kfed_acknowledged[0] != term or self._kfed_acknowledged[1] < plan.verified:
            self._kfed_acknowledged = (term, plan.verified)

        # Raft step 5: commitIndex = min(leaderCommit, index of the last entry this message verified).
        commit = self._SyncObj__raftCommitIndex
        if commit > self._SyncObj__getCurrentLogIndex():  # only after the "cannot happen" truncation above
            commit = self._SyncObj__getCurrentLogIndex()
        commit = max(commit, min(leader_commit, plan.verified))
        self._SyncObj__raftCommitIndex = commit
        self._SyncObj__raftLog.setRaftCommitIndex(commit)
        return True

    def _note_kept_entries(self, term: int, verified: int, last: int, prev_idx: int) -> None:
        """A message that matched but carried fewer entries than this node holds: pysyncobj would have
        deleted ``verified + 1 .. last``. Logged (it is the lost-write bug's trigger) and counted."""
        acked_term, acked = self._kfed_acknowledged
        acked_here = acked if acked_term == term else 0
        log.info(
            "append_entries (term %d, prevLogIdx %d) verified up to %d; kept entries %d..%d%s",
            term,
            prev_idx,
            verified,
            verified + 1,
            last,
            f", of which up to {acked_here} already acknowledged to this leader" if acked_here > verified else "",
        )

    def _applyCommand(self, command: bytes, callback: Any, commandType: int | None = None) -> None:
        """pysyncobj's: queue a command for the Raft thread; but that thread is woken (a byte down its pipe)
        once per burst of commands, not once per command. A leader's event loop proposes a burst whenever
        commits free its callers; each wake-up was a write() on this side and a poll() return and tick on
        the Raft thread, for a queue it drains whole anyway (``_checkCommandsToApply`` clears the mark first,
        so a command queued after the drain started wakes it again)."""
        if commandType is not None:
            command = bytes((commandType,)) + command
        try:
            self._SyncObj__commandsQueue.put_nowait((command, callback))
        except queue.Full:
            self._SyncObj__callErrCallback(FAIL_REASON.QUEUE_FULL, callback)
            return
        if not self._kfed_wake_sent:
            self._kfed_wake_sent = True
            self._SyncObj__pipeNotifier.notify()

    def _checkCommandsToApply(self) -> None:
        self._kfed_wake_sent = False
        SyncObj._checkCommandsToApply(self)

    @replicated  # type: ignore[untyped-decorator]  # pysyncobj is untyped
    def apply_command(self, data: bytes) -> list[Outcome]:
        return self._kfed_state.apply_command(data)
