"""Idempotent producers through the gateway: client producer ids, and the physical ones they stand for.

A client's producer id is minted here (InitProducerId): ``2**62 | incarnation << 24 | counter``, where the
incarnation is this process's registration in the log (above every earlier one), so no two gateway
processes ever hand out the same id, and none collides with the low ids brokers allocate.

Brokers only accept producer ids they allocated (Tansu answers UNKNOWN_PRODUCER_ID otherwise), so each
(client id, client epoch) gets, per sub-cluster, a physical id from that cluster's own InitProducerId, and
batch headers are rewritten (``protocol.rewrite_producer``). Sequence numbers pass through: they are per
partition, and a logical partition is one physical partition.

Any instance can take over a client's producer: it makes its own physical id for it. The broker has no
state for that id yet, so a partition's first batch under it must start at sequence 0; a later one (the
client was mid-stream through another instance, or this one forgot it) gets UNKNOWN_PRODUCER_ID, on which
clients bump their epoch and restart their sequences at 0 (KIP-360): at least once, nothing lost.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from . import protocol as kp
from .protocol import ErrorCode
from .upstream import ClusterClient, UpstreamError

CLIENT_ID_BASE: Final = 1 << 62
COUNTER_BITS: Final = 24
MAX_INCARNATION: Final = (1 << (62 - COUNTER_BITS)) - 1
MAX_EPOCH: Final = 32_767
MAX_MAPPINGS: Final = 100_000
"""Physical producers remembered (least recently used forgotten: their clients get UNKNOWN_PRODUCER_ID)."""


class ProducerIdsExhausted(Exception):
    """This process minted every id of its incarnation (16M): it must restart to register anew."""


@dataclass(slots=True)
class PhysicalProducer:
    producer_id: int
    producer_epoch: int
    seen: set[tuple[str, int]] = field(default_factory=set)  # physical partitions written through it

    def admits(self, topic: str, partition: int, base_sequence: int) -> bool:
        """Whether a batch may go to this physical partition: always once a first batch went there, and as
        the first only from sequence 0 (the broker knows nothing of this id before)."""
        key = (topic, partition)
        if key in self.seen:
            return True
        if base_sequence != 0:
            return False
        self.seen.add(key)
        return True


class ProducerIds:
    def __init__(self) -> None:
        self.incarnation: int | None = None
        self._counter = 0
        self._physical: OrderedDict[tuple[int, int, str], asyncio.Future[PhysicalProducer]] = OrderedDict()

    def mint(self) -> int:
        if self.incarnation is None:
            raise ProducerIdsExhausted("this gateway has not registered yet")
        if self._counter >= 1 << COUNTER_BITS:
            raise ProducerIdsExhausted(f"this gateway process minted {1 << COUNTER_BITS} producer ids")
        self._counter += 1
        return CLIENT_ID_BASE | (self.incarnation & MAX_INCARNATION) << COUNTER_BITS | self._counter

    async def physical(self, producer_id: int, producer_epoch: int, cluster: ClusterClient) -> PhysicalProducer:
        """The physical producer standing for the client's (id, epoch) on ``cluster``, allocated there on
        first use (concurrent callers share one allocation)."""
        key = (producer_id, producer_epoch, cluster.cluster_id)
        future = self._physical.get(key)
        if future is not None and not (future.done() and future.exception() is not None):
            self._physical.move_to_end(key)
            return await asyncio.shield(future)
        future = asyncio.ensure_future(_allocate(cluster))
        self._physical[key] = future
        while len(self._physical) > MAX_MAPPINGS:
            self._physical.popitem(last=False)
        return await asyncio.shield(future)


async def _allocate(cluster: ClusterClient) -> PhysicalProducer:
    conn = await cluster.any_connection()
    response = await conn.call(kp.INIT_PRODUCER_ID, conn.version(kp.INIT_PRODUCER_ID),
                               {"transactional_id": None, "transaction_timeout": -1})  # fmt: skip
    if response.error_code != ErrorCode.none:
        raise UpstreamError(f"cluster {cluster.cluster_id} refused a producer id: {response.error_code.name}")
    return PhysicalProducer(int(response.producer_id), int(response.producer_epoch))
