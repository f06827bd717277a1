"""How a ``FederatedProducer`` routes one logical topic, for one metadata offset and mute state: a ``Target`` per
logical partition, the round-robin of key-less messages (read in C by ``sdk/_speedups.c``), and a strict topic's
slot table; built once per route so that ``produce`` makes no object and no lookup beyond its route.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import cycle
from typing import Any, Final, NamedTuple

from confluent_kafka import KafkaError

from metadata_log.image import ClusterImage
from metadata_log.image.key_order_history import KeyOrderTopic, first_moves
from metadata_log.keymap import SLOT_MASK, epoch_header

from .messages import Origin, Report

Send = Callable[..., None]  # a physical producer's produce(topic, value, key, partition, callback, None, ts, headers)

# Errors that say "this cluster is not taking writes", as opposed to a problem with one message.
CLUSTER_ERRORS: Final = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


class AfterFailure(NamedTuple):
    """What becomes of a message whose delivery failed."""

    reroute: bool
    """Produce it again, elsewhere: it was never sent, and the producer chose its partition."""
    mute: bool
    """Route around its cluster for a while: the error says the cluster takes no writes."""


def after_failure(code: int, rerouted: bool, transactional: bool) -> AfterFailure:
    """A failed delivery of ``code``: a key-less message this producer routed (``rerouted``) and purged from a
    queue before it was sent is produced again elsewhere, unless it belongs to a transaction (which stays on
    its participants: it aborts instead); anything else is reported failed, and a cluster error also mutes its
    cluster."""
    if rerouted and code == KafkaError._PURGE_QUEUE and not transactional:
        return AfterFailure(reroute=True, mute=False)
    return AfterFailure(reroute=False, mute=code in CLUSTER_ERRORS)


class Target:
    """One logical partition as this producer routes to it, valid for one route (metadata offset and mute
    state). Built once per route, so that ``produce`` makes no object and no lookup beyond its route."""

    __slots__ = ("origin", "physical_partition", "physical_topic", "report_pinned", "send")

    def __init__(self, origin: Origin, physical_topic: str, physical_partition: int) -> None:
        self.origin = origin
        self.physical_topic = physical_topic
        self.physical_partition = physical_partition
        # Set when the partition takes writes (its cluster's producer exists): the physical producer's
        # produce, and the delivery report of messages pinned here (by key or partition) without a callback
        # of their own.
        self.send: Send | None = None
        self.report_pinned: Report | None = None


Keyless = tuple[Send, str, int, Report, Target]
"""A writable partition as key-less messages go to it: (send, physical topic, physical partition, their
delivery report, the target). Their report differs from pinned messages': a purged one is produced again
elsewhere. The first four are what the C router (``sdk/_speedups.c``) reads."""


@dataclass(frozen=True, slots=True)
class Route:
    """One logical topic's routing, valid for one (metadata offset, mute state)."""

    writable: tuple[Target, ...]
    keyless: Iterator[Keyless]  # round-robin over writable, for key-less messages
    targets: Mapping[int, Target]  # every logical partition, writable or not
    why_not: Mapping[int, str]  # logical partition -> why it takes no writes
    # What waits instead of being refused: partitions that take writes but have no leader yet; every
    # partition when the metadata is not loaded yet (the topic is then not known either way).
    leaderless: frozenset[int] = frozenset()
    loaded: bool = True
    # key_order strict: the target of each key slot (None: its partition takes no writes now, keyed
    # messages of that slot wait), the epoch header, and per slot the headers of a message without its own:
    # [stamp] for a slot that has moved by this epoch, None for one that never did (not stamped: the header
    # costs librdkafka a third of a produce, and such a record waits for nothing; docs/KEY_ORDER.md).
    table: Sequence[Target | None] | None = None
    stamp: tuple[str, bytes] | None = None
    stamps: Sequence[list[tuple[str, bytes]] | None] | None = None

    def waits(self, partition: int) -> bool:
        """Whether a message for this explicit partition waits (rather than is refused) while it cannot go."""
        return not self.loaded or partition in self.leaderless

    def keyed(self, key: Any) -> Target | None:
        """Where a keyed message goes now; None while it cannot go (``FederatedProducer.produce`` does the
        same inline)."""
        crc = zlib.crc32(key if isinstance(key, bytes) else str(key).encode())
        if self.table is not None:
            return self.table[crc & SLOT_MASK]
        return self.writable[crc % len(self.writable)] if self.writable else None

    def takes(self, partition: int | None, key: Any) -> bool:
        """Whether a message for ``partition`` (None: routed here) with ``key`` can go now."""
        if partition is None:
            return bool(self.writable) if key is None else self.keyed(key) is not None
        return partition in self.targets and partition not in self.why_not


NOT_LOADED: Final = Route((), cycle(()), {}, {}, loaded=False)


def why_not_writable(state: str, cluster: ClusterImage | None) -> str:
    if state != "writable":
        return f"partition is {state}"
    if cluster is None:
        return "its cluster is not registered"
    if cluster.fenced:
        return f"cluster {cluster.cluster_id} is fenced ({cluster.fenced_reason})"
    return f"cluster {cluster.cluster_id} is {cluster.state}"


def with_epoch_header(headers: Any, stamp: tuple[str, bytes]) -> list[Any]:
    """``headers`` (None, a list of pairs or a dict, as confluent-kafka takes them) with the epoch header."""
    if headers is None:
        return [stamp]
    if isinstance(headers, dict):
        return [*headers.items(), stamp]
    return [*headers, stamp]


def keyless_router(routes: dict[str, Iterator[Keyless]], produce: Callable[..., None]) -> Callable[..., None]:
    """``produce`` with its usual call, a key-less message with no extras, sent in C over ``routes`` (the
    topics' round-robins): the Python method costs a produce loop about a tenth of its speed. ``produce``
    itself when the C module was not built."""
    try:
        from ._speedups import KeylessRouter
    except ImportError:
        return produce
    return KeylessRouter(routes, produce)


def strict_table(
    history: KeyOrderTopic, writable: Sequence[Target]
) -> tuple[list[Target | None], tuple[str, bytes], list[list[tuple[str, bytes]] | None]]:
    """A strict topic's slot -> target table for its current epoch (a slot whose partition is not in ``writable``
    maps to None: its keyed messages wait), its epoch header, and per slot the headers of a message without its
    own (``Route.stamps``)."""
    by_partition = {t.origin.partition: t for t in writable}
    table: list[Target | None] = []
    for first, end, partition in history.map.ranges():
        table += [by_partition.get(partition)] * (end - first)
    stamp = epoch_header(history.epoch)
    stamped = [stamp]
    return table, stamp, [stamped if epoch else None for epoch in first_moves(history)]
