"""Strict key order for the gateway's groups: a Kafka client's read of a strict topic stops before the first
record its group must not have yet (``docs/KEY_ORDER.md``).

An SDK consumer holds a record back and hands out the ones behind it. A Kafka client cannot be made to: it
reads a partition by offset, and its position passes whatever it was given. So the gateway ends a fetch
answer of a strict topic's partition before the first record that waits (``keyorder.holdback.first_held``),
rewriting the batch it falls in (``protocol.batches.cut``); everything behind it in that partition waits
with it. The client asks for that offset again, and gets it once the group released what it waited for.

- **Whose read.** A fetch names no group, and need not come to the instance the member joined through (an
  instance serves the partitions it leads). But the quorum gives each partition to at most one member per
  group, and the log's group generations say which groups have it assigned: a fetch is read for those
  groups, narrowed to the group of a member consuming the partition here that came from the fetching client
  (same client id and host) when there is one. A wait for one group too many delays, never disorders. A
  partition no group has (a client that assigns itself partitions) is not held back.
- **Releases** are in the log: the quorum records one once the group committed the parent up to its seal.
  The gateway keeps the offsets its members commit through it (and those they fetch when they start a
  partition), and reports those of the strict partitions a member owns in its quorum heartbeat, with the
  offset of the metadata it acts on. The SDK's members act on a release only once the parent's owner has
  seen it, so as to flag the late writes they read; a Kafka client is told of no order break, so the
  gateway acts on every recorded release.
- **Give-ups.** A parent that kept a group's read waiting ``kfed.key.order.max.wait.ms`` (60 s) is reported
  for a give-up; the quorum grants it only for a parent that cannot be read to its seal (a fenced cluster).
- Batches compressed with snappy, lz4 or zstd are not read here, and go out as they are (the gateway and the
  SDK's producers write uncompressed or gzip batches to strict topics by default).

Memory is bounded by the members this instance serves (committed offsets of partitions they own, the parents
their groups wait for) and by the log's group assignments (an index, made again when they change and a
strict read needs it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from kafka_wire import batches
from metadata_client.holdback import DEFAULT_MAX_WAIT_MS, first_held
from metadata_log.image import MetadataImage
from metadata_log.image.key_order_history import KeyOrderTopic, Parent, open_parents
from metadata_log.image.key_orders import strict_history

log = logging.getLogger("kfed.gateway")

TopicPartition = tuple[str, int]
MAX_GIVE_UPS = 1000  # per heartbeat, the quorum's bound


class Owner(Protocol):
    """A group member this instance serves, as the hold-back reads it (``members.Member`` is one)."""

    group: str
    given: frozenset[TopicPartition]  # what the client was told it owns
    reported: frozenset[TopicPartition]  # what the quorum is told it owns


class GroupKeyOrder:
    """This instance's part of its groups' strict key order."""

    def __init__(self, max_wait_ms: int = DEFAULT_MAX_WAIT_MS) -> None:
        self.max_wait_s = max_wait_ms / 1000
        self._committed: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> committed offset
        self._waiting_since: dict[tuple[str, str, Parent], float] = {}  # (group, topic, parent) -> first wait
        self._assigned: tuple[object, dict[TopicPartition, set[str]]] = (None, {})  # (image.groups, index)
        self._unreadable_noted = False

    # -- the group's side ---------------------------------------------------------------------------
    def committed(self, image: MetadataImage, group: str, topic: str, partition: int, offset: int) -> None:
        """``group``'s committed offset (physical) on a logical partition, as a commit or an offset fetch
        through this instance saw it; kept for strict topics only."""
        if strict_history(image.key_orders, topic) is not None:
            self._committed[(group, topic, partition)] = offset

    def beat_fields(self, member: Owner, owned: Iterable[TopicPartition], image: MetadataImage) -> dict[str, Any]:
        """What a member's quorum heartbeat reports for strict key order: the metadata it acts on (this
        instance's), the group's commits on the strict partitions it owns, and the parents its group's reads
        waited for too long."""
        group = member.group
        committed = []
        for topic, partition in owned:
            offset = self._committed.get((group, topic, partition))
            if offset is not None and strict_history(image.key_orders, topic) is not None:
                committed.append([topic, partition, offset])
        now = time.monotonic()
        give_up: list[list[Any]] = []
        for (g, topic, parent), since in list(self._waiting_since.items()):
            if g != group:
                continue
            history = strict_history(image.key_orders, topic)
            if history is None or history.release(group, parent) is not None:
                del self._waiting_since[(g, topic, parent)]  # released meanwhile (or no longer strict)
            elif now - since >= self.max_wait_s and len(give_up) < MAX_GIVE_UPS:
                give_up.append([topic, *parent])
        return {"metadata_offset": image.offset, "committed": committed, "give_up": give_up}

    def forget(self, live: Iterable[Owner]) -> None:
        """Keep only what the members still served here need (called as expired members are dropped)."""
        live = list(live)
        groups = {m.group for m in live}
        owned = {(m.group, *tp) for m in live for tp in m.given | m.reported}
        self._committed = {k: o for k, o in self._committed.items() if k in owned}
        self._waiting_since = {k: s for k, s in self._waiting_since.items() if k[0] in groups}

    # -- the read's side ----------------------------------------------------------------------------
    def readers(self, image: MetadataImage, here: Iterable[Owner], tp: TopicPartition) -> list[str]:
        """The groups a client's fetch of ``tp`` is read for (the module's docstring); ``here``: the members
        this instance serves that came from that client."""
        mine = {m.group for m in here if tp in m.given}
        if mine:
            return sorted(mine)
        if self._assigned[0] is not image.groups:  # the log's groups changed (an image keeps them otherwise)
            index: dict[TopicPartition, set[str]] = {}
            for g in image.groups.values():
                for m in g.members:
                    for assigned in m.assignment:
                        index.setdefault(assigned, set()).add(g.group)
            self._assigned = (image.groups, index)
        return sorted(self._assigned[1].get(tp, ()))

    def cut(
        self,
        history: KeyOrderTopic,
        groups: Iterable[str],
        topic: str,
        fetch_offset: int,
        records: bytes,
        max_bytes: int,
    ) -> bytes:
        """``records`` fetched at ``fetch_offset`` from a logical partition of strict ``topic`` (its key-order
        ``history``), ended before the first record one of ``groups`` must not have yet."""
        waiting = [g for g in groups if open_parents(history, g)]
        if not waiting or not records:
            return records
        try:
            keyed = list(batches.keyed_records(records, fetch_offset, max_bytes))
        except (batches.UnsupportedCompression, batches.BadBatch) as e:
            if not self._unreadable_noted:
                self._unreadable_noted = True
                log.warning("records of strict topic %s go out without a hold-back: %s", topic, e)
            return records
        stop: int | None = None
        for group in waiting:
            held = self._first_held(group, topic, history, keyed)
            if held is not None and (stop is None or held < stop):
                stop = held
        if stop is None:
            return records
        # nothing the client has not had before the held one: an empty answer (a batch of records below its
        # position would move it nowhere, and it would ask again at once)
        return batches.cut(records, stop, max_bytes) if stop > fetch_offset else b""

    def _first_held(
        self, group: str, topic: str, history: KeyOrderTopic, keyed: list[tuple[int, int, int | None]]
    ) -> int | None:
        released = {(e, p) for (g, e, p) in history.releases if g == group}
        held = first_held(history, released, keyed)
        if held is None:
            return None
        offset, parents = held
        now = time.monotonic()
        for parent in parents:  # its wait starts with the first read it stopped
            self._waiting_since.setdefault((group, topic, parent), now)
        return offset
