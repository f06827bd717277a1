"""Consumer groups coordinated by the quorum leader.

Membership is soft state on the leader, rebuilt from heartbeats (a heartbeat is also the join: it
carries the member's subscription). What it decides is logged by the group commands
(``metadata_log.commands.groups``): the coordinator, and each generation's assignment.

Exclusive ownership: every heartbeat reports the logical partitions the member is *consuming now*. A
member may start a partition of its assignment only when no other live member still consumes it
(``startable``), nor was told it may start it: a member told so counts as consuming it until its assignment
no longer has it, since it may start it after the report the coordinator last heard (a group forming gave
one partition to two members until the first one's next heartbeat). Members drop revoked partitions
(after committing) before they report, and stop consuming everything when they cannot heartbeat for a
session timeout, so a partition is never read by two members of the group at once. Pure: the caller passes
the clock in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from metadata_log import commands
from metadata_log.errors import Conflict
from metadata_log.image import MetadataImage
from metadata_log.image.key_order_history import acted_on
from metadata_log.image.key_orders import strict_history
from metadata_log.records import GroupGenerationStarted, Record

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
    granted: frozenset[TopicPartition] = field(default_factory=frozenset)
    """What it was told it may start, while its assignment has it: consumed, as far as others go."""


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
        before = members.get(member_id)
        members[member_id] = Member(
            member_id, tuple(sorted(set(topics))), session_timeout_ms / 1000, now_s, frozenset(owned), metadata_offset,
            before.granted if before is not None else frozenset(),
        )  # fmt: skip
        return member_id

    def leave(self, group: str, member_id: str) -> bool:
        return self._groups.get(group, {}).pop(member_id, None) is not None

    def expire(self, now_s: float) -> None:
        for members in self._groups.values():
            for member_id in [m.member_id for m in members.values() if now_s - m.last_seen_s > m.session_timeout_s]:
                del members[member_id]

    def subscriptions(self, group: str) -> dict[str, tuple[str, ...]]:
        """The live members of ``group`` and the topics each subscribes to."""
        return {m.member_id: m.topics for m in self._groups.get(group, {}).values()}

    def decide(self, image: MetadataImage, node_id: int, now_s: float) -> list[Record]:
        """Records that make each group's generation match its live members and the topics' partitions."""
        self.expire(now_s)
        records: list[Record] = []
        for group in sorted(self._groups):
            records += commands.claim_group(image, group, node_id).records
            current = image.groups.get(group)
            if now_s < self._grace_until_s and current is not None:
                heard = self._heard.get(group, set())
                if any(m.member_id not in heard for m in current.members):
                    continue  # a new leader waits for the current members to re-report before rebalancing
            records += commands.start_generation(image, group, self.subscriptions(group)).records
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
        others = {tp for m in members.values() if m.member_id != member_id for tp in m.owned | m.granted}
        startable = [tp for tp in assignment if tp not in others]
        member = members.get(member_id)
        if member is not None:
            member.granted = (member.granted & set(assignment)) | set(startable)
        subscribed = member.topics if member is not None else ()
        return {
            "member_id": member_id,
            "generation": g.generation if g else 0,
            "coordinator_id": g.coordinator_id if g else None,
            "assignment": [list(tp) for tp in assignment],
            "startable": [list(tp) for tp in startable],
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
