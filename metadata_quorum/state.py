"""The replicated state machine: image + idempotency keys, advanced by one command at a time.

A Raft *command* carries a group of *proposals* (group commit); each proposal is the records of one
client write plus its idempotency key. Each proposal is applied atomically and gets consecutive
offsets; a proposal that does not apply is rejected without touching the state. ``apply_command``
never raises (an exception inside a pysyncobj replicated method stops the whole cluster), and it is
deterministic: every node computes the same outcomes. The one thing that is not the same on every node is
what its code can read: a committed command of a newer metadata version than this node reads stops the node
(``halt``) rather than be skipped here and applied everywhere else.

This module does not import pysyncobj; ``metadata_log/raft/`` is the layer around it.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from metadata_log.codec import (
    MAX_DECODE_BYTES,
    CodecError,
    Run,
    decode_rows,
    decode_runs,
    encode_rows,
    encode_runs,
    pack,
    records_of,
    unpack,
)
from metadata_log.errors import CorruptData
from metadata_log.heap import freeze_survivors, gc_paused
from metadata_log.image import BULK_TYPES, EMPTY_IMAGE, InvalidRecord, MetadataImage, Touched, apply_touched
from metadata_log.publisher import LogDelta, MetadataPublisher, Publishers
from metadata_log.records import LATEST_METADATA_VERSION, NewerMetadataVersion, Record
from metadata_log.snapshot import layout_for, pack_body, read_body

log = logging.getLogger(__name__)

COMMAND_VERSION: Final = 1
"""The command layout of metadata version 1: ``[1, [[key, fingerprint, rows], ...]]``; version 2 writes ``2``
and its records as runs (``codec.encode_runs``). A command is written in the image's
``metadata_version``, which every voter reads; every version up to ``LATEST_METADATA_VERSION`` is read.
Version 3 has the layout of 2 and admits newer record types."""
FREEZE_EVERY_RECORDS: Final = 100_000
"""Applied records after which the objects alive are frozen out of garbage collection (``freeze_survivors``):
each freeze costs one collection of what is not frozen yet, so it runs once per this many records, not per
command."""
MAX_IDEMPOTENCY_KEYS: Final = 100_000
"""Keys remembered in the replicated state; the oldest is forgotten first (deterministic on every node)."""
MAX_IDEMPOTENCY_KEY_CHARS: Final = 255


@dataclass(frozen=True, slots=True)
class Proposal:
    """The records of one client write; applied all or nothing."""

    records: tuple[Record, ...]
    idempotency_key: str | None = None
    fingerprint: str | None = None  # hash of the request, to refuse a key reused for another request


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one proposal. ``status``: committed, duplicate, rejected, key_reused."""

    status: str
    first_offset: int = -1  # offsets of its records (committed / duplicate); -1 when it has none
    last_offset: int = -1
    detail: str = ""


MAX_DUMP_BYTES: Final = 1 << 30
"""The largest state dump a node loads (its own at start, or its leader's by InstallSnapshot): a dump is
written by a node of the quorum, not by a client, and a 100 M-partition image is ~100 MiB, above the
``MAX_DECODE_BYTES`` a client's body may have."""

HALT_EXIT_STATUS: Final = 3
"""The exit status of a node stopped by ``halt_process``."""


def halt_process(reason: str) -> None:
    """``LogState``'s default ``halt``: log ``reason`` and end the process at once, from the Raft thread. A
    shutdown through the event loop would leave the Raft thread applying the commands after it meanwhile, and
    a dump taken then would record the state as applied past the command it could not read. Ended here, the
    node restarts from its last dump and journal, which still hold that command, and applies it once
    upgraded."""
    log.critical("stopping this node: %s", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(HALT_EXIT_STATUS)


def encode_command(proposals: Sequence[Proposal], metadata_version: int = COMMAND_VERSION) -> bytes:
    return _encode_command(proposals, metadata_version)[0]


def _encode_command(proposals: Sequence[Proposal], metadata_version: int) -> tuple[bytes, bool, list[_Write]]:
    """The command's bytes in ``metadata_version``'s layout, whether every record in it ``round_trips``, and
    its proposals as the proposer applies them: version 2's runs as columns, as its followers decode them."""
    if not COMMAND_VERSION <= metadata_version <= LATEST_METADATA_VERSION:
        raise ValueError(f"no command layout for metadata version {metadata_version}")
    body, writes, exact = [], [], True
    for p in proposals:
        if metadata_version == COMMAND_VERSION:
            rows, rows_exact = encode_rows(p.records)
            writes.append(_Write.of(p))
        else:
            rows, read_back, rows_exact = encode_runs(p.records)
            runs = _proposer_runs(read_back, p.records)
            writes.append(_Write(p.idempotency_key, p.fingerprint, runs, len(p.records), p.records))
        body.append([p.idempotency_key, p.fingerprint, rows])
        exact = exact and rows_exact
    return pack([metadata_version, body]), exact, writes


def _proposer_runs(read_back: list[Run | Record], records: Sequence[Record]) -> list[Run | Record]:
    """A proposer's own records as ``apply_runs`` takes them: the runs it encoded where the delta replays a
    run as columns (``BULK_TYPES``: what ``MetadataDelta`` would otherwise get from the records again), the
    records themselves elsewhere (a run of another type is replayed record by record)."""
    runs: list[Run | Record] = []
    at = 0
    for item in read_back:
        if not isinstance(item, Run):
            runs.append(item)
            at += 1
            continue
        if item.cls in BULK_TYPES:
            runs.append(item)
        else:
            runs += records[at : at + item.n]
        at += item.n
    return runs


def decode_command(data: bytes) -> list[Proposal]:
    """The proposals ``encode_command`` wrote; ``CodecError``, or ``NewerMetadataVersion`` for a command this
    code cannot read."""
    return [write.proposal() for write in _decode_writes(data)]


@dataclass(frozen=True, slots=True)
class _Write:
    """One proposal as ``LogState`` applies it: its records as ``apply_runs`` takes them (a follower's runs of
    one type as columns), how many there are, and the record objects where this node has them (a command it
    proposed, or one written as rows). A follower builds them from the runs only when a publisher asks for
    them: applying a command of version 2 needs no record object."""

    idempotency_key: str | None
    fingerprint: str | None
    runs: Sequence[Run | Record]
    count: int
    records: Sequence[Record] | None

    @classmethod
    def of(cls, proposal: Proposal) -> _Write:
        records = proposal.records
        return cls(proposal.idempotency_key, proposal.fingerprint, records, len(records), records)

    def committed_records(self) -> Sequence[Record]:
        return self.records if self.records is not None else records_of(self.runs)

    def proposal(self) -> Proposal:
        return Proposal(tuple(self.committed_records()), self.idempotency_key, self.fingerprint)


def _write_from_rows(key: str | None, fingerprint: str | None, rows: list[Any]) -> _Write:
    """A proposal of metadata version 1: its records as wire rows."""
    records = records_of(decode_rows(rows))
    return _Write(key, fingerprint, records, len(records), records)


def _write_from_runs(key: str | None, fingerprint: str | None, items: list[Any]) -> _Write:
    """A proposal of metadata version 2: its records as runs (``codec.encode_runs``), checked, not built."""
    runs = list(decode_runs(items))
    return _Write(key, fingerprint, runs, sum(item.n if isinstance(item, Run) else 1 for item in runs), None)


def _decode_writes(data: bytes) -> list[_Write]:
    value = unpack(data)
    if not isinstance(value, list) or len(value) != 2 or type(value[0]) is not int:
        raise CodecError("not a kfed command")
    decode_write = _DECODERS.get(value[0])
    if decode_write is None:
        if value[0] > LATEST_METADATA_VERSION:
            raise NewerMetadataVersion(value[0])
        raise CodecError(f"a command of metadata version {value[0]}: there is none below {COMMAND_VERSION}")
    if not isinstance(value[1], list):
        raise CodecError("a command holds a list of proposals")
    out = []
    for item in value[1]:
        if not isinstance(item, list) or len(item) != 3:
            raise CodecError("a proposal is [idempotency_key, fingerprint, records]")
        key, fingerprint, records = item
        if not (key is None or isinstance(key, str)) or not (fingerprint is None or isinstance(fingerprint, str)):
            raise CodecError("idempotency key and fingerprint must be strings or null")
        if not isinstance(records, list):
            raise CodecError("a proposal's records must be a list")
        out.append(decode_write(key, fingerprint, records))
    return out


_DECODERS: Final[dict[int, Callable[[str | None, str | None, list[Any]], _Write]]] = {
    1: _write_from_rows,
    2: _write_from_runs,
    3: _write_from_runs,  # the layout of 2; what is new are record types (``records.FIRST_VERSION``)
    4: _write_from_runs,  # the same: range records
}


class LogState:
    """Image plus idempotency keys. Mutated only by ``apply_command`` (on the Raft thread)."""

    def __init__(self, publisher: MetadataPublisher | None = None, halt: Callable[[str], None] = halt_process) -> None:
        self.image: MetadataImage = EMPTY_IMAGE
        self._halt = halt  # called with the reason when this node cannot go on (see the module's docstring)
        self._keys: OrderedDict[str, tuple[str | None, Outcome]] = OrderedDict()
        self._publishers = Publishers()
        if publisher is not None:
            self._publishers.subscribe(publisher)
        self._proposed = _ProposedCommands()
        self._applied_since_freeze = 0

    def subscribe(self, publisher: MetadataPublisher) -> None:
        """Publish to ``publisher`` (on the Raft thread) after each command that committed records, and after
        the state was replaced by a dump (at start, or a snapshot from the leader); a catch-up first if this
        state was published before."""
        self._publishers.subscribe(publisher)

    def outcome_for_key(self, key: str) -> tuple[str | None, Outcome] | None:
        """(fingerprint, outcome) of a committed write with this idempotency key, if remembered."""
        return self._keys.get(key)

    def encode_proposal(self, proposals: Sequence[Proposal]) -> bytes:
        """``encode_command`` for a command this node proposes (as leader). When applying it here needs no
        decoding (see ``_ProposedCommands``), the proposals are kept until it is applied."""
        data, exact, writes = _encode_command(proposals, self.image.metadata_version)
        if exact and len(data) <= MAX_DECODE_BYTES:  # applied here from these, where others could not decode it
            self._proposed.add(data, writes)
        return data

    def apply_command(self, data: bytes) -> list[Outcome]:
        """Apply one Raft command; returns one outcome per proposal. Never raises for what a command holds (one
        that does not decode, or a proposal that does not apply, is rejected)."""
        try:
            writes = self._proposed.take(data) or _decode_writes(data)
        except NewerMetadataVersion as e:
            return self._cannot_read(e)
        except (CodecError, TypeError, ValueError) as e:
            log.error("undecodable command of %d bytes ignored: %s", len(data), e)
            return [Outcome("rejected", detail=f"undecodable command: {e}")]
        base = self.image
        published = _Published()
        outcomes = self._apply_together(writes, published) if len(writes) > 1 else None
        if outcomes is None:
            outcomes = []
            for write in writes:
                try:
                    outcome = self._apply_proposal(write, published)
                except NewerMetadataVersion as e:
                    return self._cannot_read(e)
                except Exception as e:  # a bug in apply must not stop the quorum: reject, loudly
                    log.exception("proposal rejected by an unexpected error")
                    outcome = Outcome("rejected", detail=f"internal error: {type(e).__name__}: {e}")
                outcomes.append(outcome)
        if published.writes:
            self._publishers.publish(self.image, _delta_of, base, self.image, published)
        self._applied_since_freeze += sum(write.count for write in published.writes)
        if self._applied_since_freeze >= FREEZE_EVERY_RECORDS and freeze_survivors():
            self._applied_since_freeze = 0
        return outcomes

    def _cannot_read(self, error: NewerMetadataVersion) -> list[Outcome]:
        """Stop this node: a committed command it cannot read. Returns only when ``halt`` does (tests)."""
        self._halt(f"the log holds a committed command this node cannot apply: {error}")
        return [Outcome("rejected", detail=str(error))]

    def _apply_together(self, proposals: Sequence[_Write], published: _Published) -> list[Outcome] | None:
        """The outcomes of applying ``proposals`` one after another, computed with one ``apply`` of all
        their records, or None (nothing changed) when a proposal would not commit or an idempotency key
        needs the one-at-a-time path. Each ``apply`` copies the image's maps it changes (its clusters,
        its topics), so a group-committed command of many small writes pays that once, not per write; a
        command with a rejected proposal pays the attempt on top of the one-at-a-time path. Changes nothing
        unless it returns outcomes."""
        if len(proposals) > MAX_IDEMPOTENCY_KEYS:  # its own keys would push each other out
            return None
        return self._apply_all(proposals, published)

    def _apply_all(self, proposals: Sequence[_Write], published: _Published) -> list[Outcome] | None:
        keys = self._keys
        new_keys: dict[str, tuple[str | None, Outcome]] = {}
        outcomes: list[Outcome] = []
        committed: list[_Write] = []
        runs: list[Run | Record] = []
        offset = self.image.offset
        for proposal in proposals:
            key = proposal.idempotency_key
            if key is not None:
                seen = new_keys.get(key)
                if seen is None and key in keys:
                    # one at a time, the keys added before this proposal may have pushed this one out
                    pushed_out = len(keys) + len(new_keys) - MAX_IDEMPOTENCY_KEYS
                    if pushed_out > 0 and key in itertools.islice(keys, pushed_out):
                        return None
                    seen = keys[key]
                if seen is not None:
                    outcomes.append(_replayed(seen, proposal.fingerprint))
                    continue
            n = proposal.count
            if n:
                outcome = Outcome("committed", offset + 1, offset + n)
                offset += n
                runs += proposal.runs
                committed.append(proposal)
            else:
                outcome = Outcome("committed")
            if key is not None:
                new_keys[key] = (proposal.fingerprint, outcome)
            outcomes.append(outcome)
        try:
            self.image, touched = apply_touched(self.image, runs)  # raises before changing anything
        except Exception:  # InvalidRecord, or a bug: the one-at-a-time path rejects the right proposal
            return None
        published.add(committed, touched)
        keys.update(new_keys)
        self._forget_oldest_keys()
        return outcomes

    def _apply_proposal(self, proposal: _Write, published: _Published) -> Outcome:
        key = proposal.idempotency_key
        if key is not None:
            seen = self._keys.get(key)
            if seen is not None:
                return _replayed(seen, proposal.fingerprint)
        base = self.image
        try:
            after, touched = apply_touched(base, proposal.runs)
        except InvalidRecord as e:
            return Outcome("rejected", detail=str(e))
        self.image = after
        if proposal.count:
            published.add((proposal,), touched)
        outcome = Outcome("committed", base.offset + 1, after.offset) if proposal.count else Outcome("committed")
        if key is not None:
            self._keys[key] = (proposal.fingerprint, outcome)
            self._forget_oldest_keys()
        return outcome

    def _forget_oldest_keys(self) -> None:
        while len(self._keys) > MAX_IDEMPOTENCY_KEYS:
            self._keys.popitem(last=False)

    # -- durable form -----------------------------------------------------------------------------
    def capture(self, raft_internal: Any) -> Callable[[], bytes]:
        """Freeze the state now (cheap: the image is immutable, the keys are copied) and return a function
        that encodes it later, off the Raft thread."""
        image = self.image
        keys = [[k, fp, o.status, o.first_offset, o.last_offset, o.detail] for k, (fp, o) in self._keys.items()]

        def encode() -> bytes:
            return frame(pack_body(image, layout_for(image), {"keys": keys, "raft": raft_internal}))

        return encode

    def dump(self, raft_internal: Any) -> bytes:
        """The whole state as framed msgpack (records, not pickle), with ``raft_internal`` alongside."""
        return self.capture(raft_internal)()

    def load(self, data: bytes) -> Any:
        """Restore from ``dump`` output; returns its ``raft_internal``. ``CorruptState`` if damaged."""
        body = unframe(data)
        try:
            with gc_paused():
                value = unpack(body, MAX_DUMP_BYTES)
                image = read_body(value, int(value["offset"]))
            value_raft = value["raft"]
            keys: OrderedDict[str, tuple[str | None, Outcome]] = OrderedDict()
            for k, fp, status, first, last, detail in value["keys"]:
                keys[k] = (fp, Outcome(status, first, last, detail))
        except NewerMetadataVersion as e:
            self._halt(f"a state dump (at start, or a snapshot from the leader) this node cannot read: {e}")
            raise CorruptState(f"state dump of a newer metadata version: {e}") from e
        except (CodecError, InvalidRecord, KeyError, TypeError, ValueError) as e:
            raise CorruptState(f"state dump does not decode: {e}") from e
        replaced, self.image = self.image, image
        self._keys = keys
        self._publishers.publish(image, LogDelta.replaced, replaced, image)  # readers restart from this image
        del value, body  # the decoded form: garbage now, and it must not be frozen
        freeze_survivors(collect=False)  # everything built since the pause is the image: nothing to find
        self._applied_since_freeze = 0
        return value_raft


class _Published:
    """The committed writes of records of one command, at base.offset + 1, base.offset + 2, ..., and what
    their replay touched (``Touched``), for the delta that publishes them."""

    __slots__ = ("touched", "writes")

    def __init__(self) -> None:
        self.writes: list[_Write] = []
        self.touched: list[Touched] = []

    def add(self, writes: Sequence[_Write], touched: Touched) -> None:
        self.writes += writes
        self.touched.append(touched)


def _delta_of(base: MetadataImage, image: MetadataImage, published: _Published) -> LogDelta:
    """The records of committed writes over ``base``, in order (built from a follower's runs here)."""
    writes, touched = published.writes, Touched.union(published.touched)
    if len(writes) == 1:
        return LogDelta.committed(base, writes[0].committed_records(), image, touched)
    return LogDelta.committed(
        base, [record for write in writes for record in write.committed_records()], image, touched
    )


def _replayed(seen: tuple[str | None, Outcome], fingerprint: str | None) -> Outcome:
    """The outcome of a proposal whose idempotency key is remembered: the first one's, unless the request differs."""
    first_fingerprint, first = seen
    if first_fingerprint != fingerprint:
        return Outcome("key_reused", detail="Idempotency-Key was used for a different request")
    return Outcome("duplicate", first.first_offset, first.last_offset, first.detail)


class _ProposedCommands:
    """The proposals of commands this node proposed and has not applied yet, by their bytes.

    The leader would otherwise decode each of its own commands again when it commits (a sixth of its CPU
    under bulk writes). Taking the proposals instead is exact: a command is only kept when its records
    round-trip unchanged (``codec.round_trips``: what ``decode_command`` of the same bytes returns, which
    is what every follower applies), and the key is the whole command, so equal bytes mean equal
    proposals whichever proposal put them here; a command proposed again while in flight is counted, so
    each of its commits takes it. A command that never commits (lost leadership) is never taken; the
    oldest go first past ``MAX_BYTES``. Proposed on the event loop, taken on the Raft thread."""

    MAX_BYTES: Final = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._by_command: dict[bytes, tuple[list[_Write], int]] = {}  # proposals, times proposed
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, data: bytes, proposals: list[_Write]) -> None:
        with self._lock:
            kept = self._by_command.get(data)
            if kept is not None:
                self._by_command[data] = (kept[0], kept[1] + 1)
                return
            self._by_command[data] = (proposals, 1)
            self._bytes += len(data)
            while self._bytes > self.MAX_BYTES:
                oldest = next(iter(self._by_command))
                self._bytes -= len(oldest)
                del self._by_command[oldest]

    def take(self, data: bytes) -> list[_Write] | None:
        if not self._by_command:  # nothing kept (a follower, usually): nothing to hash
            return None
        with self._lock:
            kept = self._by_command.get(data)
            if kept is None:
                return None
            proposals, times = kept
            if times > 1:
                self._by_command[data] = (proposals, times - 1)  # keeps its place in the eviction order
            else:
                del self._by_command[data]
                self._bytes -= len(data)
            return proposals


class CorruptState(CorruptData):
    """A dump or snapshot file that is truncated or damaged; never served."""


_MAGIC: Final = b"KFEDSNP1"
_HEADER: Final = struct.Struct("<8sQI")  # magic, body length, crc32 of body


def frame(body: bytes) -> bytes:
    """Length + CRC framing so a truncated or corrupted file is detected, not half-loaded."""
    return _HEADER.pack(_MAGIC, len(body), zlib.crc32(body)) + body


def unframe(data: bytes) -> bytes:
    if len(data) < _HEADER.size:
        raise CorruptState(f"file of {len(data)} bytes is shorter than its header")
    magic, length, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise CorruptState("not a kfed state file (bad magic)")
    body = data[_HEADER.size :]
    if len(body) != length:
        raise CorruptState(f"truncated: header says {length} bytes, file has {len(body)}")
    if zlib.crc32(body) != crc:
        raise CorruptState("checksum mismatch: the file is corrupted")
    return body
