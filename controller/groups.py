"""Consumer groups coordinated by the quorum leader.

Membership is soft state on the leader, rebuilt from heartbeats (a heartbeat is also the join: it
carries the member's subscription). Generations and assignments are log records
(``GroupGenerationStarted``); the coordinator is recorded with ``GroupCoordinatorAssigned``.

Exclusive ownership: every heartbeat reports the logical partitions the member is *consuming now*. A
member may start a partition of its assignment only when no other live member still consumes it
(``startable``). Members drop revoked partitions (after committing) before they report, and stop
consuming everything when they cannot heartbeat for a session timeout, so a partition is never read by
two members of the group at once. Pure: the caller passes the clock in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from metadata_log import commands
from metadata_log.errors import Conflict, NotFound
from metadata_log.image import MetadataImage
from metadata_log.image.key_order_history import acted_on, open_parents
from metadata_log.image.key_orders import strict_history
from metadata_log.records import GroupCoordinatorAssigned, GroupGenerationStarted, GroupMember, KeyRangeReleased, Record

SESSION_TIMEOUT_MS_DEFAULT: Final = 10_000
SESSION_TIMEOUT_MS_MIN: Final = 1_000
SESSION_TIMEOUT_MS_MAX: Final = 120_000
GROUP_HEARTBEAT_MS: Final = 1_000
MAX_MEMBERS_PER_GROUP: Final = 1_000

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_s: float
    last_seen_s: float
    owned: frozenset[TopicPartition] = field(default_factory=frozenset)
    metadata_offset: int = -1  # of the metadata it acts on (strict key order: releases it has seen)


class GroupCoordinator:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Member]] = {}
        self._heard: dict[str, set[str]] = {}  # group -> members heard from since this term began
        self._grace_until_s = 0.0

    def start_term(self, now_s: float) -> None:
        """This node just became leader: members re-report within a session before anyone counts as gone."""
        self._groups.clear()
        self._heard.clear()
        self._grace_until_s = now_s + SESSION_TIMEOUT_MS_DEFAULT / 1000

    def heartbeat(
        self,
        group: str,
        member_id: str | None,
        topics: Sequence[str],
        owned: Iterable[TopicPartition],
        session_timeout_ms: int,
        now_s: float,
        metadata_offset: int = -1,
    ) -> str:
        """Join or renew; returns the member id (a new one when ``member_id`` is None)."""
        members = self._groups.setdefault(group, {})
        if member_id is None:
            member_id = f"m-{uuid.uuid4().hex[:12]}"
        if member_id not in members and len(members) >= MAX_MEMBERS_PER_GROUP:
            raise Conflict(f"group {group!r} has {MAX_MEMBERS_PER_GROUP} members already")
        self._heard.setdefault(group, set()).add(member_id)
        members[member_id] = Member(
            member_id, tuple(sorted(set(topics))), session_timeout_ms / 1000, now_s, frozenset(owned), metadata_offset
        )
        return member_id

    def leave(self, group: str, member_id: str) -> bool:
        return self._groups.get(group, {}).pop(member_id, None) is not None

    def expire(self, now_s: float) -> None:
        for members in self._groups.values():
            for member_id in [m.member_id for m in members.values() if now_s - m.last_seen_s > m.session_timeout_s]:
                del members[member_id]

    def desired(self, group: str, image: MetadataImage) -> tuple[GroupMember, ...]:
        """Round-robin per topic over the members subscribed to it, in member-id order; removed partitions
        are dropped, read-only ones stay assigned (they are read to their end)."""
        members = sorted(self._groups.get(group, {}).values(), key=lambda m: m.member_id)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        for topic_name in sorted({t for m in members for t in m.topics}):
            topic = image.topics.get(topic_name)
            if topic is None:
                continue
            subscribers = [m.member_id for m in members if topic_name in m.topics]
            live = [p.partition for p in topic.partitions if p.state != "removed"]
            for i, partition in enumerate(live):
                assignment[subscribers[i % len(subscribers)]].append((topic_name, partition))
        return tuple(GroupMember(m, tuple(assignment[m])) for m in sorted(assignment))

    def decide(self, image: MetadataImage, node_id: int, now_s: float) -> list[Record]:
        """Records that make each group's generation match its live members and the topics' partitions."""
        self.expire(now_s)
        records: list[Record] = []
        for group in sorted(self._groups):
            current = image.groups.get(group)
            if current is None or current.coordinator_id != node_id:
                records.append(GroupCoordinatorAssigned(group, node_id))
            if now_s < self._grace_until_s and current is not None:
                heard = self._heard.get(group, set())
                if any(m.member_id not in heard for m in current.members):
                    continue  # a new leader waits for the current members to re-report before rebalancing
            desired = self.desired(group, image)
            if current is None or desired != current.members:
                generation = current.generation + 1 if current else 1
                records.append(GroupGenerationStarted(group, generation, desired))
        for group in [g for g, members in self._groups.items() if not members]:
            if not any(isinstance(r, GroupGenerationStarted) and r.group == group for r in records):
                del self._groups[group]  # empty and recorded as such: forget it
                self._heard.pop(group, None)
        return records

    def reply(self, group: str, member_id: str, image: MetadataImage) -> dict[str, Any]:
        """What a member should consume: its assignment in the current generation, and which of those
        partitions it may start now (no other live member still consumes them)."""
        g = image.groups.get(group)
        assignment: tuple[TopicPartition, ...] = ()
        if g is not None:
            for m in g.members:
                if m.member_id == member_id:
                    assignment = m.assignment
        members = self._groups.get(group, {})
        others = {tp for m in members.values() if m.member_id != member_id for tp in m.owned}
        subscribed = members[member_id].topics if member_id in members else ()
        return {
            "member_id": member_id,
            "generation": g.generation if g else 0,
            "coordinator_id": g.coordinator_id if g else None,
            "assignment": [list(tp) for tp in assignment],
            "startable": [list(tp) for tp in assignment if tp not in others],
            "heartbeat_ms": GROUP_HEARTBEAT_MS,
            "key_releases": self.key_releases(group, subscribed, image),
        }

    def key_releases(self, group: str, topics: Iterable[str], image: MetadataImage) -> dict[str, list[list[int]]]:
        """Per strict topic of ``topics``: the group's releases its members may act on now, ``[epoch,
        partition]`` each: those the current owner of the parent partition has seen (``acted_on``,
        docs/KEY_ORDER.md decision 4)."""
        out: dict[str, list[list[int]]] = {}
        for name in topics:
            history = strict_history(image.key_orders, name)
            if history is None:
                continue
            seen = {p: m.metadata_offset for m in self._groups.get(group, {}).values() for t, p in m.owned if t == name}
            out[name] = [[epoch, p] for epoch, p in sorted(acted_on(history, group, seen))]
        return out

    def key_order_records(
        self,
        group: str,
        image: MetadataImage,
        topics: Iterable[str],
        committed: Iterable[tuple[str, int, int]],
        give_up: Iterable[tuple[str, int, int]],
    ) -> list[Record]:
        """The releases a member's heartbeat calls for, over the strict ones of the ``topics`` it subscribes
        to: parents the group committed up to their seal (``committed``, as the member read them) or that
        were drained (``release_parents``), and parents it waited too long for that cannot be read to
        their seal (``give_up``; one that can be read is waited for: refused, nothing recorded)."""
        by_topic: dict[str, dict[int, int]] = {}
        for name, partition, offset in committed:
            by_topic.setdefault(name, {})[partition] = offset
        records: list[Record] = []
        for name in sorted(set(topics) | set(by_topic)):
            history = strict_history(image.key_orders, name)
            if history is not None and open_parents(history, group):
                offsets = by_topic.get(name, {})
                records += commands.release_parents(image, group, name, offsets).records
        released = {(r.topic, r.epoch, r.partition) for r in records if isinstance(r, KeyRangeReleased)}
        for name, epoch, partition in give_up:
            if (name, epoch, partition) in released or strict_history(image.key_orders, name) is None:
                continue
            try:
                reason = f"group {group} waited its kfed.key.order.max.wait.ms"
                records += commands.give_up(image, group, name, epoch, partition, reason).records
            except (Conflict, NotFound):
                continue  # readable (the group is to read it) or not an open parent: nothing to record
        return records
