"""The Kafka group members this gateway instance serves, and their part of strict key order.

Membership itself is the quorum's (``groups.py`` says how a Kafka member maps onto a quorum member); what
this instance keeps is what it handed each member, so as to tell it to rejoin when the quorum's assignment
moves, and the hold-back's state of their groups (``holdback.py``). All of it is rebuilt by a rejoin.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from .holdback import GroupKeyOrder, TopicPartition


@dataclass(slots=True)
class Member:
    group: str
    member_id: str
    topics: tuple[str, ...]
    protocol: str
    cooperative: bool
    session_timeout_ms: int
    client_id: str | None
    client_host: str
    given: frozenset[TopicPartition] = frozenset()  # what the client was told it owns
    reported: frozenset[TopicPartition] = frozenset()  # what the quorum is told it owns (given, and claims)
    generation: int = 0
    last_seen_s: float = field(default_factory=time.monotonic)
    last_quorum_s: float = field(default_factory=time.monotonic)


class Members:
    """This instance's members, by (group, member id) and by the client they came from."""

    def __init__(self) -> None:
        self.members: dict[tuple[str, str], Member] = {}  # changed through add() and drop() only
        self.by_client: dict[tuple[str | None, str], dict[tuple[str, str], Member]] = {}  # (client id, host)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.key_order = GroupKeyOrder()

    def lock(self, group: str, member_id: str) -> asyncio.Lock:
        """Calls of one member run one at a time (a heartbeat must not cross a sync)."""
        return self._locks.setdefault((group, member_id), asyncio.Lock())

    def add(self, member: Member) -> None:
        key = (member.group, member.member_id)
        self.drop(key)
        self.members[key] = member
        self.by_client.setdefault((member.client_id, member.client_host), {})[key] = member

    def drop(self, key: tuple[str, str]) -> None:
        member = self.members.pop(key, None)
        if member is not None:
            client = (member.client_id, member.client_host)
            same = self.by_client.get(client, {})
            same.pop(key, None)
            if not same:
                self.by_client.pop(client, None)

    def forget_expired(self) -> None:
        now = time.monotonic()
        for key, m in list(self.members.items()):
            if now - m.last_seen_s > m.session_timeout_ms / 1000:
                self.drop(key)
                self._locks.pop(key, None)
        self.key_order.forget(self.members.values())

    def stop(self) -> None:
        self.members.clear()
        self.by_client.clear()
        self._locks.clear()
        self.key_order.forget(())
