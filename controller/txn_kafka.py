"""The coordinator's Kafka calls on a participant cluster's transaction coordinator, and kio's quirk with them.

Three calls end a participant's part of a federated transaction without its producer (docs/TRANSACTIONS.md):
DescribeTransactions (KIP-664) to see the open transaction's producer id and epoch, EndTxn to end it as the
log decided, and InitProducerId with that id and epoch as the expected ones (KIP-360), which fences the
producer: a stale caller fails on the epoch instead of touching a newer transaction. Connections and
framing are the gateway's (``gateway/upstream.py``, ``gateway/protocol``: message layouts from kio).

kio 0.6.5 refuses a DescribeTransactions response whose ``transaction_start_time_ms`` is -1 (a
transactional id with no transaction started: state Empty), "Cannot parse negative timestamp". That one
call is therefore made on a connection of its own, and the -1 read as 0 before kio decodes the frame
(``_known_start_times``); its result does not use the start time.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import CONNECT_TIMEOUT_S, BrokerConnection, UpstreamError

CLIENT_ID: Final = "kfed-txn-coordinator"
DESCRIBE_TRANSACTIONS: Final = 65
END_TXN: Final = 26
END_TXN_VERSION: Final = 3  # flexible; 4 only adds TRANSACTION_ABORTABLE, 5 is transaction version 2
INIT_PRODUCER_ID_VERSION: Final = 4  # 3+ carries the expected producer id and epoch (KIP-360)
FIND_COORDINATOR_VERSION: Final = 3  # one key per request; 4+ batch them
REQUEST_TIMEOUT_S: Final = 10.0
MAX_FRAME_BYTES: Final = 1024 * 1024
"""Largest DescribeTransactions answer read (one transactional id: its partitions, a few KB)."""
_I64: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Described:
    """A transactional id as its Kafka coordinator describes it (Kafka's TransactionState names)."""

    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, ...
    producer_id: int
    epoch: int


class _Connection(BrokerConnection):
    async def _negotiate(self) -> None:
        """ApiVersions v3 naming this client's software, which Apache Kafka requires (empty names are
        INVALID_REQUEST)."""
        data = {"client_software_name": "kfed", "client_software_version": "1"}
        response = await self.call(kp.API_VERSIONS, 3, data, REQUEST_TIMEOUT_S)
        if response.error_code != ErrorCode.none:
            raise UpstreamError(f"broker {self.address} refused ApiVersions: {response.error_code.name}")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


class Participant:
    """One participant cluster's transaction coordinators, by Kafka transactional id. Connections are
    opened on use and kept per broker (completions are rare: no pool)."""

    def __init__(self, cluster_id: str, bootstrap: str) -> None:
        self.cluster_id = cluster_id
        self.bootstrap = bootstrap
        self._addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
        self._connections: dict[str, BrokerConnection] = {}

    async def _connection(self, address: str) -> BrokerConnection:
        conn = self._connections.get(address)
        if conn is None or conn.closed:
            conn = self._connections[address] = await _Connection(address, CLIENT_ID).open()
        return conn

    async def _any_connection(self) -> BrokerConnection:
        last: Exception | None = None
        for address in self._addresses:
            try:
                return await self._connection(address)
            except UpstreamError as e:
                last = e
        raise UpstreamError(f"no broker of cluster {self.cluster_id} is reachable ({self.bootstrap}): {last}")

    async def _coordinator(self, ktid: str) -> tuple[str, BrokerConnection]:
        conn = await self._any_connection()
        response = await conn.call(
            kp.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, {"key": ktid, "key_type": 1}, REQUEST_TIMEOUT_S
        )
        if response.error_code != ErrorCode.none:
            raise UpstreamError(
                f"cluster {self.cluster_id}: no transaction coordinator for {ktid!r} ({response.error_code.name})"
            )
        address = f"{response.host}:{response.port}"
        return address, await self._connection(address)

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        """(lowest, highest) version per API key, as a broker of the cluster serves them."""
        return dict((await self._any_connection()).versions)

    async def describe(self, ktid: str) -> Described | None:
        """The transactional id's state on its coordinator; None when the cluster never saw it."""
        address, _ = await self._coordinator(ktid)
        body = await _call_describe(address, ktid)
        states = list(body.transaction_states)
        if len(states) != 1:
            raise UpstreamError(f"cluster {self.cluster_id}: DescribeTransactions answered {len(states)} states")
        s = states[0]
        if s.error_code == ErrorCode.transactional_id_not_found:
            return None
        if s.error_code != ErrorCode.none:
            raise UpstreamError(f"cluster {self.cluster_id}: DescribeTransactions {ktid!r}: {s.error_code.name}")
        return Described(str(s.transaction_state), int(s.producer_id), int(s.producer_epoch))

    async def end(self, ktid: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: commit or abort the transaction open under (producer_id, epoch); the broker's error code."""
        _, conn = await self._coordinator(ktid)
        data = {"transactional_id": ktid, "producer_id": producer_id, "producer_epoch": epoch, "committed": commit}
        response = await conn.call(END_TXN, END_TXN_VERSION, data, REQUEST_TIMEOUT_S)
        return ErrorCode(response.error_code)

    async def fence(self, ktid: str, producer_id: int, epoch: int, timeout_ms: int) -> ErrorCode:
        """InitProducerId expecting (producer_id, epoch): bumps the epoch (aborting an open transaction), so
        the producer that held it can write nothing more; the broker's error code."""
        _, conn = await self._coordinator(ktid)
        data = {
            "transactional_id": ktid,
            "transaction_timeout": timeout_ms,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        }
        response = await conn.call(kp.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, data, REQUEST_TIMEOUT_S)
        return ErrorCode(response.error_code)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


async def _call_describe(address: str, ktid: str) -> Any:
    """DescribeTransactions of one id on a connection of its own (see the module on kio)."""
    host, _, port = address.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise UpstreamError(f"cannot connect to broker {address}: {type(e).__name__}: {e}") from None
    try:
        writer.write(kp.encode_request(DESCRIBE_TRANSACTIONS, 0, 1, CLIENT_ID, {"transactional_ids": [ktid]}))
        size = kp.SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), REQUEST_TIMEOUT_S))[0]
        if not 4 <= size <= MAX_FRAME_BYTES:
            raise UpstreamError(f"broker {address} sent a DescribeTransactions frame of {size} bytes")
        frame = await asyncio.wait_for(reader.readexactly(size), REQUEST_TIMEOUT_S)
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
        raise UpstreamError(f"broker {address}: DescribeTransactions failed: {type(e).__name__}: {e}") from None
    finally:
        writer.close()
    try:
        _, body = kp.decode_response(DESCRIBE_TRANSACTIONS, 0, _known_start_times(frame))
    except kp.ProtocolError as e:
        raise UpstreamError(f"broker {address}: {e}") from None
    return body


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(frame) or shift > 28:
            raise UpstreamError("a DescribeTransactions frame ends inside a varint")
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _known_start_times(frame: bytes) -> bytes:
    """``frame`` (a DescribeTransactions v0 response of one state) with a start time of -1 read as 0.

    Walks only the fixed prefix up to the first state's start time (correlation id, empty header tags,
    throttle time, array length, error code, two compact strings, timeout); any other shape is left to kio."""
    pos = 4  # correlation id
    tags, pos = _uvarint(frame, pos)
    if tags != 0:
        return frame
    pos += 4  # throttle_time_ms
    count, pos = _uvarint(frame, pos)
    if count != 2:  # compact array of one
        return frame
    pos += 2  # error_code
    for _ in range(2):  # transactional_id, transaction_state: compact strings
        length, pos = _uvarint(frame, pos)
        pos += max(0, length - 1)
    pos += 4  # transaction_timeout_ms
    if pos + 8 > len(frame) or _I64.unpack_from(frame, pos)[0] != -1:
        return frame
    patched = bytearray(frame)
    _I64.pack_into(patched, pos, 0)
    return bytes(patched)
