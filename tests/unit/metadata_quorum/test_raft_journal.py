"""The Raft journal on disk: checksums, sync order, atomic rewrites, a full disk, pysyncobj's interface."""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pysyncobj.journal as pso_journal
import pytest

from metadata_quorum import journal as raft_journal
from metadata_quorum.state import CorruptState

from .raft_support import tmpfs


def checked_journal(path: Path, entries: int = 5) -> raft_journal.CheckedJournal:
    journal = raft_journal.CheckedJournal(str(path), fsync=True)
    for i in range(1, entries + 1):
        journal.add(b"command-%d" % i, i, 1 + i // 3)
    return journal


def test_journal_round_trip_and_an_unfinished_append_past_the_end_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    checked_journal(path)._destroy()
    fmt, entries = raft_journal.read_journal(path)
    assert fmt == raft_journal._CHECKED_FORMAT and [e[1] for e in entries] == [1, 2, 3, 4, 5]
    # Bytes of an append whose header update never happened (a crash mid-append): not an entry.
    _, end = struct.unpack_from("<II", path.read_bytes(), raft_journal._FORMAT_FIELD)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(raft_journal._encode_entry(b"never acknowledged", 6, 2)[:-7])
    assert raft_journal.read_journal(path)[1] == entries
    reopened = raft_journal.CheckedJournal(str(path), fsync=True)
    assert [reopened[i] for i in range(len(reopened))] == entries
    reopened._destroy()


def test_a_batch_append_syncs_twice_and_reads_back_like_single_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower appends all the entries of one message with two syncs (entries, then the header's end over
    # them) instead of two per entry; the file is the same as after single appends, and sync-ordered.
    single = checked_journal(tmp_path / "single.journal")
    batched = raft_journal.CheckedJournal(str(tmp_path / "batched.journal"), fsync=True)
    events: list[str] = []
    real_sync_range, real_write = raft_journal.sync_range, batched._write

    def sync_range(mm: object, offset: int, size: int) -> None:
        events.append(f"sync [{offset}, {offset + size})")
        real_sync_range(mm, offset, size)  # type: ignore[arg-type]

    monkeypatch.setattr(raft_journal, "sync_range", sync_range)
    batched._write = lambda at, data: (events.append(f"write@{at}"), real_write(at, data))[1]
    batched.add_entries([(b"command-%d" % i, i, 1 + i // 3) for i in range(1, 6)])
    end = batched._end
    assert raft_journal._END_FIELD + 4 <= raft_journal._HEADER_SIZE
    assert events == [
        f"write@{raft_journal._HEADER_SIZE}",
        f"sync [{raft_journal._HEADER_SIZE}, {end})",  # exactly the entries written
        f"write@{raft_journal._END_FIELD}",
        f"sync [0, {raft_journal._HEADER_SIZE})",  # the header, with the end field
    ]
    batched.add_entries([])
    assert len(events) == 4
    assert [batched[i] for i in range(len(batched))] == [single[i] for i in range(len(single))]
    single._destroy()
    batched._destroy()
    assert raft_journal.read_journal(tmp_path / "batched.journal") == raft_journal.read_journal(
        tmp_path / "single.journal"
    )


def test_sync_range_msyncs_whole_pages_covering_the_range_and_leaves_the_mapping_resizable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if raft_journal._msync is None:
        pytest.skip("no libc msync with a known MS_SYNC here: mmap.flush() is used")
    calls: list[tuple[int, int]] = []
    real_msync = raft_journal._msync

    def msync(address: int, length: int, flags: int) -> int:
        calls.append((address, length))
        assert flags == raft_journal._MS_SYNC
        return int(real_msync(address, length, flags))

    monkeypatch.setattr(raft_journal, "_msync", msync)
    path = tmp_path / "mapped"
    path.write_bytes(bytes(3 * mmap.PAGESIZE))
    page = mmap.PAGESIZE
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        mm[page + 10 : page + 20] = b"0123456789"
        raft_journal.sync_range(mm, page + 10, 10)  # unaligned: from the start of its page
        raft_journal.sync_range(mm, 5, 2 * page)  # across pages
        (first, first_length), (second, second_length) = calls
        assert first % page == 0 and first_length == 20  # [page, page + 20)
        assert second == first - page and second_length == 2 * page + 5  # [0, 2 pages + 5)
        mm.resize(4 * page)  # no buffer export left behind
        with pytest.raises(ValueError, match="not inside"):
            raft_journal.sync_range(mm, 4 * page - 1, 2)
    assert path.read_bytes()[page + 10 : page + 20] == b"0123456789"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[: len(data) // 2], "truncated"),  # the header's end is past the file's end
        (lambda data: data[:-40] + bytes(40), "bad size"),  # the tail zeroed (lost pages)
        (lambda data: data[:60] + bytes([data[60] ^ 0x01]) + data[61:], "checksum"),  # one bit flipped
        (lambda data: b"garbage!" + data[8:], "not a Raft journal"),
    ],
)
def test_damaged_journal_is_refused_with_a_clear_error(tmp_path: Path, damage, message: str) -> None:
    path = tmp_path / "raft.journal"
    checked_journal(path)._destroy()
    _, end = struct.unpack_from("<II", path.read_bytes(), raft_journal._FORMAT_FIELD)
    path.write_bytes(damage(path.read_bytes()[:end]))
    with pytest.raises(CorruptState, match=message) as error:
        raft_journal.CheckedJournal(str(path), fsync=True)
    assert "Refusing to start" in str(error.value) and str(path) in str(error.value)


def test_damaged_term_and_vote_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    journal._destroy()
    Path(str(path) + ".meta").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CorruptState, match="term and vote"):
        raft_journal.CheckedJournal(str(path), fsync=True)


def test_legacy_journal_is_checked_and_rewritten_with_checksums(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    legacy = pso_journal.FileJournal(str(path))
    for i in range(1, 4):
        legacy.add(b"old-%d" % i, i, 1)
    legacy._destroy()
    assert raft_journal.read_journal(path)[0] == raft_journal._LEGACY_FORMAT
    journal = raft_journal.CheckedJournal(str(path), fsync=True)
    assert [journal[i] for i in range(3)] == [(b"old-%d" % i, i, 1) for i in range(1, 4)]
    journal._destroy()
    assert raft_journal.read_journal(path)[0] == raft_journal._CHECKED_FORMAT


def test_compaction_rewrites_the_journal_atomically(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path, entries=8)
    journal.deleteEntriesTo(5)  # what pysyncobj does once a dump covers entries 1-5
    journal.add(b"after", 9, 3)
    journal._destroy()
    assert [(c, i) for c, i, _ in raft_journal.read_journal(path)[1]] == [
        (b"command-6", 6), (b"command-7", 7), (b"command-8", 8), (b"after", 9)
    ]  # fmt: skip
    assert not (tmp_path / "raft.journal.tmp").exists()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root and mount; skipped elsewhere)."""
    with tmpfs(tmp_path / "disk") as mount_point:
        yield mount_point


def test_journal_on_a_full_disk_refuses_the_entry_and_stays_readable(tiny_disk: Path) -> None:
    path = tiny_disk / "raft.journal"
    journal = raft_journal.CheckedJournal(str(path), fsync=True)
    added = 0
    with pytest.raises(raft_journal.JournalFull):
        while True:
            journal.add(bytes(20_000), added + 1, 1)
            added += 1
    assert len(journal) == added and added > 10
    journal._destroy()
    assert len(raft_journal.read_journal(path)[1]) == added  # nothing half-written


def test_a_compaction_that_finds_the_disk_full_keeps_the_journal_usable(tiny_disk: Path) -> None:
    """The journal used to close its mapping before writing the compacted file: on a full disk every later
    append then raised, while the node went on serving."""
    path = tiny_disk / "raft.journal"
    journal = raft_journal.CheckedJournal(str(path), fsync=True)
    entries = [(bytes([i]) * 20_000, i, 1) for i in range(1, 41)]
    for entry in entries:  # the file grows by doubling
        journal.add(*entry)
    assert journal._allocated - journal._end > 100  # room for the append below, reserved before the disk fills
    with open(tiny_disk / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(bytes(4096))
    journal.deleteEntriesTo(10)  # the 30 kept entries do not fit beside the journal: nothing changes
    assert journal[:] == entries and not (tiny_disk / "raft.journal.tmp").exists()
    journal.add(b"after", 41, 1)
    (tiny_disk / "filler").unlink()
    journal.deleteEntriesTo(10)  # with room, as before
    assert journal[:] == [*entries[10:], (b"after", 41, 1)]
    journal.add(b"later", 42, 1)
    journal._destroy()
    assert raft_journal.read_journal(path)[1] == [*entries[10:], (b"after", 41, 1), (b"later", 42, 1)]


def test_the_term_and_vote_file_is_synced_before_it_replaces_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``.meta`` was renamed over unsynced: a power loss could leave it empty, a node that forgot its vote."""
    path = tmp_path / "raft.journal"
    journal = checked_journal(path)
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(f"rename {Path(src).name} {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(raft_journal.os, "fsync", fsync)
    monkeypatch.setattr(raft_journal.os, "replace", replace)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    synced = ["fsync raft.journal.meta.tmp", "rename raft.journal.meta.tmp raft.journal.meta", f"fsync {tmp_path.name}"]
    assert events == synced
    events.clear()
    journal.setRaftCommitIndex(5)
    journal.onOneSecondTimer()
    assert events == synced
    journal._destroy()


def test_term_vote_and_commit_index_survive_a_reopen_in_pysyncobjs_meta_format(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path)
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId(), journal.getRaftCommitIndex()) == (0, None, 1)
    journal.setCurrentTerm(7, "127.0.0.1:1")  # durable at once: before any vote is sent
    journal.setRaftCommitIndex(5)  # stored on the one-second timer, as pysyncobj does
    assert pso_journal.MetaStorer(str(path) + ".meta").getMeta() == {"currentTerm": 7, "votedForNodeId": "127.0.0.1:1"}
    journal.onOneSecondTimer()
    journal._destroy()
    reopened = raft_journal.CheckedJournal(str(path), fsync=True)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId(), reopened.getRaftCommitIndex()) == (
        7, "127.0.0.1:1", 5
    )  # fmt: skip
    reopened._destroy()
    # pysyncobj's own journal reads what ours wrote, and ours what pysyncobj's wrote (a legacy data dir)
    assert pso_journal.MetaStorer(str(path) + ".meta").getMeta()["raftCommitIndex"] == 5
    legacy_path = tmp_path / "legacy.journal"
    legacy = pso_journal.FileJournal(str(legacy_path))
    legacy.add(b"old", 1, 3)
    legacy.setCurrentTerm(3, "127.0.0.1:2")
    legacy._destroy()
    opened = raft_journal.CheckedJournal(str(legacy_path), fsync=True)
    assert (opened.getCurrentTerm(), opened.getVotedForNodeId(), opened[0]) == (3, "127.0.0.1:2", (b"old", 1, 3))
    opened._destroy()


def test_deleting_the_last_entries_moves_the_end_back_and_later_appends_follow_it(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path, entries=5)
    journal.deleteEntriesFrom(2)  # Raft step 3: a conflict at the third entry, and all after it
    assert [entry[1] for entry in journal[:]] == [1, 2]
    journal.add(b"new", 3, 4)
    journal._destroy()
    assert [(c, i) for c, i, _ in raft_journal.read_journal(path)[1]] == [
        (b"command-1", 1), (b"command-2", 2), (b"new", 3)
    ]  # fmt: skip


def test_a_cleared_journal_holds_only_the_entries_added_after(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path, entries=5)
    journal.clear()  # what pysyncobj does before it adds a received dump's last two entries
    assert len(journal) == 0
    journal.add_entries([(b"prev", 10, 4), (b"last", 11, 4)])
    journal._destroy()
    assert raft_journal.read_journal(path)[1] == [(b"prev", 10, 4), (b"last", 11, 4)]
