"""Idempotent producers through the gateway: client producer ids, and the physical ones they stand for.

A client's producer id is minted here (InitProducerId): ``2**62 | incarnation << 24 | counter``, where the
incarnation is this process's registration in the log (above every earlier one), so no two gateway
processes ever hand out the same id, and none collides with the low ids brokers allocate.

Brokers only take producer ids they allocated, and a new one's first batch only at sequence 0 (Tansu
answers UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER otherwise). So the client's (id, epoch) stands,
on each physical partition it writes through this instance, for a *physical producer*: an id from that
partition's cluster (its InitProducerId), and a shift that makes the client's first sequence there 0.
Batch headers are rewritten (``protocol.rewrite_producer``); a retried batch is rewritten the same way, so
the broker still deduplicates it.

A batch whose producer id no gateway of the federation minted (not of the form above, of an incarnation not
registered yet, or of this process's above the last it handed out) is refused with UNKNOWN_PRODUCER_ID, which
idempotent clients answer by asking for an id again: a client cannot have a physical producer allocated per
invented id. (A client that copies another client's minted id still shares that client's deduplication.)

Physical producers are disposable, one per partition: a partition moves between instances (one dies, one
joins) while the client's sequences go on. A batch that does not follow its physical producer (a gap, or an
old sequence that is not a resend of one of the last batches) starts a new one, at that batch: the broker
cannot deduplicate across the change (at least once), and no batch is ever mistaken for a duplicate of
another. But a gap after a batch this instance refused unwritten is the client's next batch in flight, not
a move: it is refused too until the refused one comes again (``out_of_order``), or the client would count
the refused one written. (A batch whose answer never came may be written: the batches
after it go on through the same physical producer, and the broker judges them and the resend.) A broker that
lost a producer's state (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER) has its physical producer dropped
too.

On a strict topic the gateway regroups records by key (``kafka_wire/batches.py``), so no broker sees the client's
sequences: the gateway keeps them itself (``StrictSequence``), per client id, epoch and client partition. A
batch is written only after the previous one of that partition was answered, and only if it follows what was
written: a resend of a recent batch is answered as written without writing it again, anything else gets
OUT_OF_ORDER_SEQUENCE_NUMBER, which idempotent clients answer by sending their batches again in order. That is
what a broker does for an idempotent producer, so a stock client keeps a key's order and writes it once across
retries, with up to 5 requests in flight. A request whose regrouped parts were written on some partitions and
refused on others (a sub-cluster down) is answered with the error; the client sends it again, and the
records already written are left out of it (``Partial``), as a broker would deduplicate them. (A part whose
answer never came, a timeout, counts as not written: at least once.) Per instance: a partition whose leader
moves to another instance starts over there (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.batches import SlotTargets
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import ClusterClient, UpstreamError
from metadata_log.errors import KfedError

CLIENT_ID_BASE: Final = 1 << 62
COUNTER_BITS: Final = 24
COUNTER_MASK: Final = (1 << COUNTER_BITS) - 1
MAX_INCARNATION: Final = (1 << (62 - COUNTER_BITS)) - 1
MAX_EPOCH: Final = 32_767
MAX_PHYSICAL: Final = 100_000
"""Physical producers remembered (least recently used forgotten: their clients start that partition over)."""
RECENT_BATCHES: Final = 5
"""Base sequences remembered per physical producer: a retry resends one of these (brokers keep 5 as well,
and clients send at most 5 batches per partition before an answer)."""
STATE_LOST: Final = frozenset(
    {ErrorCode.unknown_producer_id, ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_producer_epoch}
)
"""Broker answers after which a physical producer is not used again."""

PhysicalKey = tuple[int, int, str, str, int]  # client id, client epoch, cluster, physical topic, partition
StrictKey = tuple[int, int, str, int]  # client id, client epoch, logical topic, client partition
ClientKey = StrictKey  # the same four: one client partition's sequence


class ProducerIdsExhausted(KfedError):
    """This process minted every id of its incarnation (16M): it must restart to register anew."""


@dataclass(slots=True)
class PhysicalProducer:
    producer_id: int
    producer_epoch: int
    shift: int | None = None  # client sequence - broker sequence; None until a first batch
    next_sequence: int = 0  # the client sequence the next batch starts at
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))

    def follows(self, base_sequence: int, last_sequence: int) -> bool:
        """Whether a batch of these client sequences goes on through this producer (noted if so): its
        first batch, the next one in order, or a resend of a recent one."""
        if self.shift is None:
            self.shift = base_sequence
        elif (base_sequence, last_sequence) in self.recent:
            return True
        elif base_sequence != self.next_sequence:
            return False
        self.recent.append((base_sequence, last_sequence))
        self.next_sequence = last_sequence + 1
        return True


DROP: Final = (1 << 31) - 1
"""The target partition of records already written (``Partial``): regrouped apart, and not sent."""


@dataclass(frozen=True, slots=True)
class Partial:
    """A batch written in part: its records regrouped by ``placed`` to a partition of ``written`` were written
    (the request's other parts were refused, so the client was answered an error and will send it again)."""

    base_sequence: int
    last_sequence: int
    placed: SlotTargets
    written: frozenset[int]

    def placement(self, now: SlotTargets) -> SlotTargets:
        """``now``, but for the records already written: those go to ``DROP``."""
        old, written = memoryview(self.placed.targets).cast("i"), self.written
        targets = array("i", now.targets)
        for slot, partition in enumerate(old):
            if partition in written:
                targets[slot] = DROP
        keyless = DROP if self.placed.keyless in written else now.keyless
        return SlotTargets(targets.tobytes(), now.stamped, keyless, now.header)


@dataclass(slots=True)
class StrictSequence:
    """What the gateway wrote of one idempotent client's partition of a strict topic (see the module doc)."""

    next_sequence: int | None = None  # None: nothing written yet through this instance
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))
    previous: asyncio.Future[Any] | None = None  # the answer of the last batch sent
    partial: Partial | None = None  # the next batch, written in part

    def verdict(self, base_sequence: int, last_sequence: int) -> ErrorCode | None:
        """None: write the batch; ``none``: a resend of a written one (answer it, do not write it again);
        else the error that refuses it."""
        if self.next_sequence is None or base_sequence == self.next_sequence:
            return None
        if (base_sequence, last_sequence) in self.recent:
            return ErrorCode.none
        return ErrorCode.out_of_order_sequence_number

    def written(self, base_sequence: int, last_sequence: int) -> None:
        self.recent.append((base_sequence, last_sequence))
        self.next_sequence = last_sequence + 1
        self.partial = None

    def refused(self, base_sequence: int, partial: Partial | None = None) -> None:
        """The batch was not written, or only in part (``partial``): a first one still fixes where the next
        must start (so a batch sent after it does not overtake it)."""
        if self.next_sequence is None:
            self.next_sequence = base_sequence
        if partial is not None:
            self.partial = partial

    def placement(self, base_sequence: int, last_sequence: int, now: SlotTargets) -> SlotTargets:
        """Where this batch's records go now: as ``now`` places them, but not again where it was written in part."""
        partial = self.partial
        if partial is None or (partial.base_sequence, partial.last_sequence) != (base_sequence, last_sequence):
            return now
        return partial.placement(now)

    async def previous_answered(self, wait_s: float) -> None:
        """Until the previous batch sent was answered (or ``wait_s`` passed)."""
        previous = self.previous
        if previous is not None and not previous.done():
            # its outcome is noted by its own callback; a timeout leaves the sequence as it is
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(previous), wait_s)


@dataclass(slots=True)
class StrictBatch:
    """An idempotent client's batch of a strict topic, on its way: noted in its sequence once answered."""

    sequence: StrictSequence
    base_sequence: int
    last_sequence: int
    tp: tuple[str, int]  # its client partition
    placed: SlotTargets | None = None  # how its records were regrouped
    written: set[int] = field(default_factory=set)  # the target partitions its request wrote (shared)

    def sent(self, answer: asyncio.Future[Any] | None) -> None:
        """The batch went out with a request whose answer is ``answer`` (None: acks=0, no answer comes, the
        batch counts as written). The partition's next batch waits for this answer."""
        if answer is None:
            self.sequence.written(self.base_sequence, self.last_sequence)
            return
        self.sequence.previous = answer
        answer.add_done_callback(self._answered)

    def _answered(self, answer: asyncio.Future[Any]) -> None:
        if not answer.cancelled() and answer.exception() is None:
            for topic in answer.result()["responses"]:
                for p in topic["partition_responses"] if topic["name"] == self.tp[0] else ():
                    if p["index"] == self.tp[1] and p["error_code"] == ErrorCode.none:
                        self.sequence.written(self.base_sequence, self.last_sequence)
                        return
        partial = None
        if self.written and self.placed is not None:  # another part failed: the client sends it all again
            written = frozenset(self.written | {DROP})
            partial = Partial(self.base_sequence, self.last_sequence, self.placed, written)
        self.sequence.refused(self.base_sequence, partial)


class ProducerIds:
    def __init__(self) -> None:
        self.incarnation: int | None = None
        self._counter = 0
        self._physical: OrderedDict[PhysicalKey, asyncio.Future[PhysicalProducer]] = OrderedDict()
        self._strict: OrderedDict[StrictKey, StrictSequence] = OrderedDict()
        self._refused: OrderedDict[ClientKey, int] = OrderedDict()  # the first sequence answered with an error
        self._sent: OrderedDict[ClientKey, int] = OrderedDict()  # the last sequence sent to a broker

    def minted(self, producer_id: int, next_incarnation: int) -> bool:
        """Whether a gateway of the federation could have minted ``producer_id``: this process up to the last id
        it handed out, another registration (below ``next_incarnation``, the log's next) any of its counter."""
        if producer_id >> 62 != 1:
            return False
        incarnation, counter = producer_id >> COUNTER_BITS & MAX_INCARNATION, producer_id & COUNTER_MASK
        if counter == 0:
            return False
        if self.incarnation is not None and incarnation == self.incarnation & MAX_INCARNATION:
            return counter <= self._counter
        return 0 < incarnation < next_incarnation

    def mint(self) -> int:
        if self.incarnation is None:
            raise ProducerIdsExhausted("this gateway has not registered yet")
        if self._counter >= COUNTER_MASK:
            raise ProducerIdsExhausted(f"this gateway process minted {1 << COUNTER_BITS} producer ids")
        self._counter += 1
        return CLIENT_ID_BASE | (self.incarnation & MAX_INCARNATION) << COUNTER_BITS | self._counter

    async def physical(
        self, key: PhysicalKey, cluster: ClusterClient, base_sequence: int, last_sequence: int
    ) -> PhysicalProducer:
        """The physical producer a batch of these client sequences goes through on one physical partition:
        the partition's current one when the batch follows it, else a new one allocated on its cluster
        (concurrent callers share one allocation)."""
        future = self._physical.get(key)
        if future is not None and future.done() and future.exception() is None:
            self._physical.move_to_end(key)
            producer = future.result()
            if producer.follows(base_sequence, last_sequence):
                return producer
            future = None
        if future is None or (future.done() and future.exception() is not None):
            future = asyncio.ensure_future(_allocate(cluster))
            self._physical[key] = future
            while len(self._physical) > MAX_PHYSICAL:
                self._physical.popitem(last=False)
        producer = await asyncio.shield(future)
        if not producer.follows(base_sequence, last_sequence):  # another batch started it meanwhile
            self.forget(key)
            return await self.physical(key, cluster, base_sequence, last_sequence)
        return producer

    def strict(self, key: StrictKey) -> StrictSequence:
        """The sequence of one client partition of a strict topic (least recently used forgotten)."""
        sequence = self._strict.get(key)
        if sequence is None:
            sequence = self._strict[key] = StrictSequence()
            while len(self._strict) > MAX_PHYSICAL:
                self._strict.popitem(last=False)
        else:
            self._strict.move_to_end(key)
        return sequence

    def forget(self, key: PhysicalKey) -> None:
        """The broker lost this producer's state: the next batch starts a new one."""
        self._physical.pop(key, None)

    def sent(self, key: ClientKey, last_sequence: int) -> None:
        """A batch of the client partition ``key`` up to ``last_sequence`` went to its broker."""
        self._sent[key] = max(last_sequence, self._sent.get(key, last_sequence))
        self._sent.move_to_end(key)
        while len(self._sent) > MAX_PHYSICAL:
            self._sent.popitem(last=False)

    def refused(self, key: ClientKey, base_sequence: int) -> None:
        """This instance answered a batch of the client partition ``key`` with an error without writing it:
        the client sends it again, and until then a later batch is not taken (``out_of_order``). A batch sent
        to its broker before (this is a resend) may be written: its broker judges what follows it."""
        if base_sequence <= self._sent.get(key, -1):
            return
        first = self._refused.get(key)
        self._refused[key] = base_sequence if first is None else min(first, base_sequence)
        self._refused.move_to_end(key)
        while len(self._refused) > MAX_PHYSICAL:
            self._refused.popitem(last=False)

    def out_of_order(self, key: ClientKey, base_sequence: int) -> bool:
        """Whether a batch must be refused because one before it was: taking it (a new physical producer at
        the gap) would tell the client that the one before was written, and librdkafka acknowledges it without
        an offset (lost). It is refused with a retriable error (NOT_LEADER_OR_FOLLOWER), upon which the
        client sends its batches again in order under the same epoch; a broker's OUT_OF_ORDER_SEQUENCE_NUMBER
        would make librdkafka bump its epoch and resend, under a new producer no broker deduplicates, an
        earlier batch that may be written. A batch at the refused sequence is its resend: from it on,
        batches go on."""
        first = self._refused.get(key)
        if first is None or base_sequence < first:
            return False
        if base_sequence == first:
            del self._refused[key]
            return False
        return True


def not_minted(producer_id: int) -> str:
    return f"producer id {producer_id} was not minted by this federation's gateways: ask for one (InitProducerId)"


async def _allocate(cluster: ClusterClient) -> PhysicalProducer:
    conn = await cluster.any_connection()
    response = await conn.call(
        kp.INIT_PRODUCER_ID, conn.version(kp.INIT_PRODUCER_ID), {"transactional_id": None, "transaction_timeout": -1}
    )
    if response.error_code != ErrorCode.none:
        raise UpstreamError(f"cluster {cluster.cluster_id} refused a producer id: {response.error_code.name}")
    return PhysicalProducer(int(response.producer_id), int(response.producer_epoch))
