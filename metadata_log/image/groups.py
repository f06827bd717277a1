"""Consumer groups whose coordinator is the quorum: their coordinator node, generation and members."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..records import GroupCoordinatorAssigned, GroupGenerationStarted, GroupMember
from .common import InvalidRecord, evolve


@dataclass(frozen=True, slots=True)
class GroupImage:
    group: str
    coordinator_id: int | None = None
    generation: int = 0
    members: tuple[GroupMember, ...] = ()


class GroupsDelta:
    """Changes to the groups over ``base`` (copy-on-write)."""

    __slots__ = ("_base", "_changed")

    def __init__(self, base: Mapping[str, GroupImage]) -> None:
        self._base = base
        self._changed: dict[str, GroupImage] | None = None

    def _writable(self) -> dict[str, GroupImage]:
        if self._changed is None:
            self._changed = dict(self._base)
        return self._changed

    def replay_coordinator(self, record: GroupCoordinatorAssigned) -> None:
        groups = self._writable()
        group = groups.get(record.group, GroupImage(group=record.group))
        groups[record.group] = evolve(group, coordinator_id=record.coordinator_id)

    def replay_generation(self, record: GroupGenerationStarted) -> None:
        groups = self._writable()
        group = groups.get(record.group, GroupImage(group=record.group))
        if record.generation <= group.generation:
            raise InvalidRecord(
                f"group {record.group!r} generation {record.generation} is not after {group.generation}"
            )
        groups[record.group] = evolve(group, generation=record.generation, members=record.members)

    def apply(self) -> Mapping[str, GroupImage]:
        return self._changed if self._changed is not None else self._base
