"""A ``FederatedConsumer``'s part of strict key order (``docs/KEY_ORDER.md`` decisions 4 and 5).

For each ``key_order: strict`` topic it consumes, the member passes every keyed record through a ``HoldBack``
(``metadata_client.holdback``): a record whose key range moved waits until the group coordinator
released the partitions it moved from (the group committed them up to their seal), and the application gets
it then. What the coordinator needs comes with the member's heartbeat (``heartbeat_fields``): the offset of
the metadata it acts on, the group's committed offsets on the strict partitions it owns that are parents
still open, and the parents it waited ``kfed.key.order.max.wait.ms`` for. The heartbeat's reply names the
releases the member may act on (``key_releases``), which ``observe`` applies.

Every delivery that may be out of key order (an *order break*) goes to ``on_order_break(consumer, OrderBreak)``
and is counted in ``stats``, with the longest hold. All of it runs on the thread that polls, except
``heartbeat_fields``, which reads values the polling thread replaces whole.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from confluent_kafka import Message

from metadata_client.holdback import DEFAULT_MAX_HELD, DEFAULT_MAX_WAIT_MS, Delivery, HoldBack, OrderBreak
from metadata_log.image import MetadataImage
from metadata_log.image.key_order_history import Parent, Release, open_parents
from metadata_log.image.key_orders import strict_history
from metadata_log.keymap import slot_of, stamp_of

log = logging.getLogger(__name__)

COMMITTED_CHECK_S: Final = 1.0
"""How often the member reads the group's committed offsets of the open parents it owns."""

OrderBreakCallback = Callable[[Any, OrderBreak], None]
LogicalPartition = tuple[str, int]


class KeyOrderMember:
    """The hold-backs of one group member, one per strict topic it has read from."""

    def __init__(
        self,
        group: str,
        max_held: int = DEFAULT_MAX_HELD,
        max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        on_order_break: OrderBreakCallback | None = None,
    ) -> None:
        self.group = group
        self.max_held = max_held
        self.max_wait_ms = max_wait_ms
        self.on_order_break = on_order_break
        self._holds: dict[str, HoldBack[Message]] = {}
        # Released by observe, not handed out yet (consume hands out at most num_messages): commits do not
        # pass them, and a revoked partition's are dropped with its held ones.
        self._ready: deque[Message] = deque()
        self._observed: tuple[object, object] | None = None  # (image, releases) last observed
        self.observed_offset = -1  # of the metadata the hold-backs act on
        self.committed: list[tuple[str, int, int]] = []  # reported in the heartbeat; replaced whole
        self.give_up: list[tuple[str, int, int]] = []
        self._committed_checked = 0.0

    # -- records -----------------------------------------------------------------------------------
    def strict(self, image: MetadataImage, topic: str) -> bool:
        return topic in image.key_orders and strict_history(image.key_orders, topic) is not None

    def offer(self, image: MetadataImage, messages: list[Message], consumer: Any) -> list[Message]:
        """The messages just read (labelled logically), minus those held back."""
        if not image.key_orders and not self._holds:
            return messages
        now_ms = _now_ms()
        out: list[Message] = []
        for m in messages:
            topic, key = m.topic(), m.key()
            if key is None or m.error() is not None or topic is None or not self.strict(image, topic):
                out.append(m)
                continue
            hold = self._hold(image, topic)
            key_bytes = key if isinstance(key, bytes) else str(key).encode()
            delivered = hold.offer(m.partition(), m.offset(), slot_of(key_bytes), stamp_of(m.headers()), m, now_ms)  # type: ignore[arg-type]  # a placed message has both
            out += self._handed(consumer, delivered)
        return out

    def _hold(self, image: MetadataImage, topic: str) -> HoldBack[Message]:
        hold = self._holds.get(topic)
        if hold is None:
            hold = self._holds[topic] = HoldBack(self.group, self.max_held, self.max_wait_ms)
            hold.observe(strict_history(image.key_orders, topic), {}, _now_ms())
        return hold

    def take(self, count: int) -> list[Message]:
        """Up to ``count`` released messages, oldest first."""
        ready = self._ready
        return [ready.popleft() for _ in range(min(count, len(ready)))]

    def observe(self, image: MetadataImage, releases: Mapping[str, Any] | None, consumer: Any) -> None:
        """New metadata or releases (the heartbeat's ``key_releases``): the held messages that may go now
        join the released ones (``take``); the parents waited for too long are noted for the next heartbeat."""
        if not self._holds:
            self.observed_offset = image.offset
            return
        now_ms = _now_ms()
        out = self._ready
        if self._observed is None or self._observed[0] is not image or self._observed[1] is not releases:
            self._observed = (image, releases)
            for topic, hold in self._holds.items():
                history = strict_history(image.key_orders, topic)
                acted: dict[Parent, Release] = {}
                if history is not None:
                    for epoch, partition in (releases or {}).get(topic, ()):
                        release = history.release(self.group, (epoch, partition))
                        if release is not None:
                            acted[(epoch, partition)] = release
                out.extend(self._handed(consumer, hold.observe(history, acted, now_ms)))
            self.observed_offset = image.offset
        self.give_up = [(topic, e, p) for topic, hold in self._holds.items() for e, p in hold.expired(now_ms)]

    def _handed(self, consumer: Any, deliveries: Iterable[Delivery[Message]]) -> list[Message]:
        out = []
        for d in deliveries:
            if d.order_break is not None:
                log.warning(
                    "group %s: order break (%s) on %s/%d: %s",
                    self.group,
                    d.order_break.kind,
                    d.item.topic(),
                    d.partition,
                    d.order_break.detail,
                )
                if self.on_order_break is not None:
                    self.on_order_break(consumer, d.order_break)
            out.append(d.item)
        return out

    # -- offsets and ownership -----------------------------------------------------------------------
    def commit_position(self, tp: LogicalPartition, position: int) -> int:
        """The offset the group may commit for ``tp`` read up to ``position``: not past a held record."""
        hold = self._holds.get(tp[0])
        if hold is None:
            return position
        position = hold.commit_position(tp[1], position)
        for m in self._ready:
            offset = m.offset()
            if m.topic() == tp[0] and m.partition() == tp[1] and offset is not None:
                position = min(position, offset)
        return position

    def drop(self, tp: LogicalPartition) -> None:
        """This member stopped consuming ``tp``: its held records are read again by the next owner."""
        hold = self._holds.get(tp[0])
        if hold is not None:
            hold.drop(tp[1], _now_ms())
            self._ready = deque(m for m in self._ready if m.topic() != tp[0] or m.partition() != tp[1])

    def parents_to_check(
        self, image: MetadataImage, owned: Iterable[LogicalPartition], now: float
    ) -> list[LogicalPartition]:
        """Owned partitions that are open parents of the group with their seal recorded, once per
        ``COMMITTED_CHECK_S`` (``now``: ``time.monotonic()``): the member reads the group's committed offsets
        there for the coordinator."""
        if now - self._committed_checked < COMMITTED_CHECK_S or not image.key_orders:
            return []
        self._committed_checked = now
        out = []
        for topic, partition in owned:
            history = strict_history(image.key_orders, topic)
            if history is None:
                continue
            if partition in {p for e, p in open_parents(history, self.group) if (e, p) in history.seals}:
                out.append((topic, partition))
        return out

    def paused(self) -> set[LogicalPartition]:
        """Partitions to stop fetching: those holding records, while ``kfed.key.order.max.held`` records or
        more are held in one strict topic (never one that holds none: it may be the parent others wait for)."""
        return {(topic, p) for topic, hold in self._holds.items() for p in hold.paused()}

    def heartbeat_fields(self) -> dict[str, Any]:
        return {
            "metadata_offset": self.observed_offset,
            "committed": [list(c) for c in self.committed],
            "give_up": [list(g) for g in self.give_up],
        }

    def stats(self) -> dict[str, Any]:
        """Per strict topic: records held now and ever, delivered, the longest hold (ms), breaks by kind."""
        return {
            topic: {
                "held": s.held,
                "held_total": s.held_total,
                "delivered": s.delivered,
                "longest_hold_ms": s.longest_hold_ms,
                "breaks": dict(s.breaks),
            }
            for topic, hold in self._holds.items()
            for s in (hold.stats,)
        }


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
