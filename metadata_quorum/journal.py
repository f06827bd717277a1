"""The Raft journal: pysyncobj's log file layout, with a checksum per entry, ordered syncs and atomic rewrites.

``CheckedJournal`` is what pysyncobj keeps its log in (the bridge hands it over in place of pysyncobj's own
mmap ``FileJournal``). It implements the journal interface pysyncobj calls (``pysyncobj.journal.Journal``:
``add``, ``clear``, ``deleteEntriesFrom``, ``deleteEntriesTo``, indexing, the term, vote and commit index;
camelCase as pysyncobj names them; ``tests/unit/metadata_quorum/test_raft_bridge.py`` pins that interface) and
reads and writes pysyncobj's file layout, so a data dir of either kind opens with the other. Nothing here
imports pysyncobj.

File layout (pysyncobj's): a 40-byte header (name, version, format, end of the valid entries), then entries
framed ``size | idx | term | command | size``. Ours (format ``_CHECKED_FORMAT``) puts a CRC-32 of (idx, term,
command) before the command. Next to it, ``<journal>.meta`` holds the term, the vote and the commit index as
pysyncobj writes them (a pickled dict).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import pickle
import platform
import struct
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, overload

from metadata_log.errors import KfedError

from .rules import Entry
from .state import CorruptState
from .wire import PICKLE_PROTOCOL, SafePickle

log = logging.getLogger(__name__)

DISK_HEADROOM_BYTES: Final = 1024 * 1024
"""A write is refused (503) unless the disk keeps this much free after the journal grows for it."""

_JOURNAL_NAME: Final = b"PYSYNCOBJ"
_NAME_SIZE: Final = 24  # pysyncobj.journal.NAME_SIZE
_VERSION_SIZE: Final = 8  # pysyncobj.journal.VERSION_SIZE
_WRITER_VERSION: Final = b"0.3.17"  # pysyncobj.journal.APP_VERSION: the header names the pysyncobj that wrote it
_LEGACY_FORMAT: Final = 1  # pysyncobj's own: no checksums
_CHECKED_FORMAT: Final = 0x4B460002  # ours: a CRC-32 in front of each entry's command ("KF", v2)
_FORMAT_FIELD: Final = _NAME_SIZE + _VERSION_SIZE
_END_FIELD: Final = _FORMAT_FIELD + 4  # pysyncobj.journal.LAST_RECORD_OFFSET_OFFSET
_HEADER_SIZE: Final = _END_FIELD + 4  # pysyncobj.journal.FIRST_RECORD_OFFSET
_ENTRY_HEAD: Final = struct.Struct("<IQQ")  # size of (idx, term, [crc,] command); idx; term
_ENTRY_OVERHEAD: Final = 28  # size, idx, term, crc, size: the bytes of one entry besides its command
_MIN_FILE_SIZE: Final = 1024  # pysyncobj maps at least this much of a journal file


def _entry_crc(idx: int, term: int, command: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(struct.pack("<QQ", idx, term) + command))


def _encode_entry(command: bytes, idx: int, term: int) -> bytes:
    body = struct.pack("<QQ", idx, term) + _entry_crc(idx, term, command) + command
    size = struct.pack("<I", len(body))
    return size + body + size


def read_journal(path: Path) -> tuple[int, list[Entry]]:
    """Check a journal file end to end and return (format, entries); ``CorruptState`` names what is wrong.

    Bytes past the header's end are an append that never completed: ignored, as pysyncobj does. Inside it
    every entry must be whole, framed, checksummed, and follow the previous one (idx + 1, term not lower):
    see ``CheckedJournal`` for why nothing inside the end can be a legitimately torn write.
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
    entries: list[Entry] = []
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


def _write_journal_file(path: Path, entries: Sequence[Entry]) -> None:
    """Write a whole journal next to ``path`` and rename it over: crash-atomic (fsync, rename, fsync dir)."""
    _replace(_write_aside(path, entries), path)


def _write_aside(path: Path, entries: Sequence[Entry]) -> Path:
    """A whole journal of ``entries``, written and fsynced next to ``path`` (removed again if that fails)."""
    body = b"".join(_encode_entry(*e) for e in entries)
    name = _JOURNAL_NAME.ljust(_NAME_SIZE, b"\0") + _WRITER_VERSION.ljust(_VERSION_SIZE, b"\0")
    header = name + struct.pack("<II", _CHECKED_FORMAT, _HEADER_SIZE + len(body))
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(header + body)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _replace(tmp: Path, path: Path) -> None:
    os.replace(tmp, path)
    fsync_path(str(path.parent))


def fsync_path(path: str) -> None:
    """fsync a file or directory by name (a directory: the renames in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- syncing a range of the mapping ---------------------------------------------------------------------
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
    walks the whole mapping: every other thread of the node (its event loop, HTTP; its Raft thread) stops
    for as long as the disk takes. msync through ctypes runs without the GIL, on the written pages only.

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


class JournalFull(OSError, KfedError):
    """No room on disk for the next journal entry; nothing was written."""

    def __init__(self, errno: int, detail: str) -> None:
        OSError.__init__(self, errno, detail)
        self.detail = detail
        self.extra: dict[str, Any] = {}


_META: Final = SafePickle()  # the term and vote file holds a dict of plain values


class CheckedJournal:
    """pysyncobj's journal, on its mmap file layout, with checks, ordered writes and room reserved first.

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
    - **Term and vote** are durable before ``setCurrentTerm`` returns (Raft §5.1: before any vote is sent).

    Every method runs on the Raft thread (``room_for`` excepted, which only reads).
    """

    def __init__(self, path: str, fsync: bool) -> None:
        self._path = Path(path)
        self._fsync = fsync
        if self._path.exists():
            fmt, entries = read_journal(self._path)
            if fmt == _LEGACY_FORMAT:
                log.info("journal %s: rewriting %d entries with checksums", path, len(entries))
                _write_journal_file(self._path, entries)
        else:
            entries = []
            _write_journal_file(self._path, [])
        self._meta_path = path + ".meta"
        self._meta = self._read_meta()
        self._meta_saved = True
        self._open(entries)

    def _open(self, entries: list[Entry]) -> None:
        """Map the journal file, which holds ``entries``; its blocks are reserved (if the disk is full, the next
        append reserves them, or says so)."""
        f = open(self._path, "r+b")  # noqa: SIM115  # closed by _close, with the mapping
        try:
            mm = mmap.mmap(f.fileno(), 0)
        except BaseException:
            f.close()
            raise
        self._entries = entries
        self._end = _HEADER_SIZE + sum(_ENTRY_OVERHEAD + len(c) for c, _, _ in entries)
        self._f, self._mm, self._allocated = f, mm, 0
        with contextlib.suppress(JournalFull):
            self._reserve(max(self._mm.size(), _MIN_FILE_SIZE))

    def _close(self) -> None:
        self._mm.flush()
        self._mm.close()
        self._f.close()

    def _read_meta(self) -> dict[str, Any]:
        try:
            raw = Path(self._meta_path).read_bytes()
        except FileNotFoundError:
            return {}
        try:
            meta = _META.loads(raw)
        except Exception:
            meta = None
        if not isinstance(meta, dict) or (not meta and raw):
            raise CorruptState(
                f"{self._meta_path}: the Raft term and vote do not decode. Refusing to start: a node that forgot "
                "its vote could vote twice in one term; wipe this node's data dir so that it catches up"
            )
        return meta

    def _store_meta(self) -> None:
        """``<meta>.tmp`` written and renamed over, as pysyncobj does; with fsync on, the file is synced before
        the rename and the directory after, so a power loss leaves the old ``.meta`` or the new one, never an
        empty one (a node that forgot its vote could vote twice in one term)."""
        tmp = self._meta_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pickle.dumps(self._meta, PICKLE_PROTOCOL))
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self._meta_path)
        if self._fsync:
            fsync_path(os.path.dirname(self._meta_path) or ".")
        self._meta_saved = True

    def _write(self, offset: int, data: bytes) -> None:
        self._mm[offset : offset + len(data)] = data

    def _reserve(self, size: int) -> None:
        """Allocate the file's blocks up to ``size`` bytes (mmap writes into holes SIGBUS on a full disk)."""
        if size <= self._allocated:
            return
        error: OSError | None = None
        for want in (max(size, 2 * self._allocated), size):  # grow by doubling when there is room
            try:
                os.posix_fallocate(self._f.fileno(), 0, want)
            except OSError as e:
                error = e
                continue
            if len(self._mm) < want:  # map what was allocated (writes must land inside the mapping)
                self._mm.resize(want)
            self._allocated = want
            return
        assert error is not None
        raise JournalFull(error.errno or 0, f"no room for the Raft journal ({self._path}): {error.strerror}")

    def room_for(self, command_bytes: int) -> bool:
        """Whether the disk can take an entry of this size now (read-only: safe off the Raft thread)."""
        needed = self._end + command_bytes + _ENTRY_OVERHEAD - self._allocated
        if needed <= 0:
            return True
        st = os.statvfs(self._path.parent)
        return bool(st.f_bavail * st.f_frsize >= max(needed, 2 * self._allocated) + DISK_HEADROOM_BYTES)

    def _sync(self, offset: int = 0, size: int = _HEADER_SIZE) -> None:
        """Make ``size`` bytes at ``offset`` durable (by default the header, where the end of the log is)."""
        if self._fsync:
            sync_range(self._mm, offset, size)

    def _set_end(self, end: int) -> None:
        self._end = end
        self._write(_END_FIELD, struct.pack("<I", end))

    # -- pysyncobj's journal interface ---------------------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        self.add_entries(((command, idx, term),))

    def add_entries(self, entries: Sequence[Entry]) -> None:
        """Append consecutive entries with two syncs in all (the entries, then the header's end over them)
        instead of two per entry: a follower receives many entries per ``append_entries`` and answers once,
        after this returns, so every entry it acknowledges is still durable before the reply. All or none:
        room for the whole batch is reserved before any byte is written."""
        if not entries:
            return
        data = b"".join(_encode_entry(*e) for e in entries)
        start = self._end
        self._reserve(start + len(data))
        self._write(start, data)
        self._sync(start, len(data))  # the entries are durable before the header covers them
        self._entries.extend(entries)
        self._set_end(start + len(data))
        self._sync()

    def clear(self) -> None:
        """Empty the log (pysyncobj then adds a dump's two entries, which syncs the header)."""
        self._entries = []
        self._set_end(_HEADER_SIZE)

    @overload
    def __getitem__(self, item: int) -> Entry: ...
    @overload
    def __getitem__(self, item: slice) -> list[Entry]: ...
    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Drop the entries from position ``entryFrom`` on: only moves the header's end back, so atomic."""
        removed = self._entries[entryFrom:]
        del self._entries[entryFrom:]
        self._set_end(self._end - sum(_ENTRY_OVERHEAD + len(c) for c, _, _ in removed))
        self._sync()

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the entries before position ``entryTo`` (a dump covers them): the kept ones are written to a new
        file, which is renamed over this one once written. If it cannot be written (a full disk), this journal
        stays as it was and in use, the dropped entries included: the dump covers them, and the next compaction
        tries again."""
        kept = self._entries[entryTo:]
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            os.replace(_write_aside(self._path, kept), self._path)  # the old file stays mapped until closed
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.error("journal %s: compaction failed, the entries a dump covers are kept: %s", self._path, e)
            return
        self._close()
        self._open(list(kept))
        fsync_path(str(self._path.parent))

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False  # stored on the next second's timer, as pysyncobj does

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._store_meta()  # Raft: term + vote durable before any vote is sent

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._store_meta()

    def flush(self) -> None:
        self._mm.flush()

    def _destroy(self) -> None:
        self._close()


def finish_compaction(path: Path, prev: Sequence[Any], last: Sequence[Any]) -> bool:
    """Drop the journal entries before a dump's ``prev`` entry if a crash left them there; True if it did.

    pysyncobj truncates the journal to start at the dump's (prev, last) entries only on the tick after the
    dump is durable. A node killed in between restarts with the new dump and the old journal, and
    pysyncobj, finding that the journal does not start with (prev, last), *clears* it: every entry after
    the dump, acknowledged ones included, is gone from that node. This finishes the truncation instead
    (atomically, as ``CheckedJournal.deleteEntriesTo`` does), so that pysyncobj finds what it expects.
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
