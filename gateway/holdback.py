"""Strict key order for the gateway's groups: a Kafka client's read of a strict topic stops before the first
record its group must not have yet (``docs/KEY_ORDER.md``).

An SDK consumer holds a record back and hands out the ones behind it. A Kafka client cannot be made to: it
reads a partition by offset, and its position passes whatever it was given. So the gateway ends a fetch
answer of a strict topic's partition before the first record that waits (``keyorder.holdback.first_held``),
rewriting the batch it falls in (``protocol.batches.cut``); everything behind it in that partition waits
with it. The client asks for that offset again, and gets it once the group released what it waited for.

- **Whose read.** A fetch names no group. It is read for the groups with a member that consumes the partition
  through this instance and came from the fetching client (same client id and host); when none matches, for
  every group with a member consuming it here (a wait for one group too many delays, never disorders). A
  partition no member consumes here (a client that assigns itself partitions) is not held back.
- **Releases.** The quorum releases a parent once the group committed it up to its seal. The gateway keeps,
  per group, the offsets its members committed through it, and reports those of the open parents a member
  owns in that member's heartbeat, with the offset of the metadata it acts on; the answer's releases (those
  the parent's owner has seen) are what the group's reads wait on.
- **Give-ups.** A parent that kept a group's read waiting ``kfed.key.order.max.wait.ms`` (60 s) is reported
  for a give-up; the quorum grants it only for a parent that cannot be read to its seal (a fenced cluster).
- Batches compressed with snappy, lz4 or zstd are not read here, and go out as they are (the gateway and the
  SDK's producers write uncompressed or gzip batches to strict topics by default).

Memory is bounded by the members this instance serves: committed offsets of partitions they own, releases
of groups they belong to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from metadata_log.image import MetadataImage
from metadata_log.keyorder.history import KeyOrderTopic, Parent, open_parents
from metadata_log.keyorder.holdback import DEFAULT_MAX_WAIT_MS, first_held
from metadata_log.keyorder.replay import strict_history

from .protocol import batches

if TYPE_CHECKING:
    from .groups import Member

log = logging.getLogger("kfed.gateway")

TopicPartition = tuple[str, int]


class GroupKeyOrder:
    """This instance's part of its groups' strict key order."""

    def __init__(self, max_wait_ms: int = DEFAULT_MAX_WAIT_MS) -> None:
        self.max_wait_s = max_wait_ms / 1000
        self._released: dict[str, dict[str, frozenset[Parent]]] = {}  # group -> topic -> releases to act on
        self._committed: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> committed offset
        self._waiting_since: dict[tuple[str, str, Parent], float] = {}  # (group, topic, parent) -> first wait
        self._unreadable_noted = False

    # -- the group's side ---------------------------------------------------------------------------
    def committed(self, image: MetadataImage, group: str, topic: str, partition: int, offset: int) -> None:
        """``group``'s committed offset (physical) on a logical partition, as a commit or an offset fetch
        through this instance saw it; kept for strict topics only."""
        if strict_history(image.key_orders, topic) is not None:
            self._committed[(group, topic, partition)] = offset

    def beat_fields(self, member: Member, owned: Iterable[TopicPartition], image: MetadataImage) -> dict[str, Any]:
        """What a member's quorum heartbeat reports for strict key order: the metadata it acts on (this
        instance's), the group's commits on the strict partitions it owns, and the parents it waited too long
        for."""
        group = member.group
        committed = []
        for topic, partition in owned:
            offset = self._committed.get((group, topic, partition))
            if offset is not None and strict_history(image.key_orders, topic) is not None:
                committed.append([topic, partition, offset])
        now = time.monotonic()
        give_up = [
            [topic, epoch, partition]
            for (g, topic, (epoch, partition)), since in self._waiting_since.items()
            if g == group and topic in member.topics and now - since >= self.max_wait_s
        ]
        return {"metadata_offset": image.offset, "committed": committed, "give_up": give_up[:1000]}

    def heard(self, group: str, reply: Mapping[str, Any]) -> None:
        """A quorum heartbeat's answer for a member of ``group``: the releases the group may act on now."""
        releases = reply.get("key_releases")
        if isinstance(releases, Mapping):
            released = self._released[group] = {
                topic: frozenset((int(e), int(p)) for e, p in parents) for topic, parents in releases.items()
            }
            for key in [k for k in self._waiting_since if k[0] == group and k[2] in released.get(k[1], ())]:
                del self._waiting_since[key]

    def forget(self, live: Iterable[Member]) -> None:
        """Keep only what the members still served here need (called as expired members are dropped)."""
        groups = {m.group for m in live}
        owned = {(m.group, *tp) for m in live for tp in m.given | m.reported}
        self._released = {g: r for g, r in self._released.items() if g in groups}
        self._committed = {k: o for k, o in self._committed.items() if k in owned}
        self._waiting_since = {k: s for k, s in self._waiting_since.items() if k[0] in groups}

    # -- the read's side ----------------------------------------------------------------------------
    def cut(
        self, image: MetadataImage, groups: Iterable[str], topic: str, fetch_offset: int, records: bytes,
        max_bytes: int,
    ) -> bytes:  # fmt: skip
        """``records`` fetched from a logical partition of ``topic`` at ``fetch_offset``, ended before the first
        record one of ``groups`` must not have yet."""
        history = strict_history(image.key_orders, topic)
        if history is None or not records:
            return records
        waiting = [(g, history) for g in groups if open_parents(history, g)]
        if not waiting:
            return records
        try:
            keyed = list(batches.keyed_records(records, fetch_offset, max_bytes))
        except (batches.UnsupportedCompression, batches.BadBatch) as e:
            if not self._unreadable_noted:
                self._unreadable_noted = True
                log.warning("records of strict topic %s go out without a hold-back: %s", topic, e)
            return records
        stop: int | None = None
        for group, topic_history in waiting:
            held = self._first_held(group, topic, topic_history, keyed)
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
        released = self._released.get(group, {}).get(topic, frozenset())
        held = first_held(history, released, keyed)
        if held is None:
            return None
        offset, parents = held
        now = time.monotonic()
        for parent in parents:  # its wait starts with the first read it stopped
            self._waiting_since.setdefault((group, topic, parent), now)
        return offset
