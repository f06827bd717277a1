"""Commands on consumer groups whose coordinator is the quorum leader (docs/DESIGN.md, groups).

Membership is the leader's soft state (``controller.groups``, rebuilt from heartbeats); what it decides is
logged here: which node coordinates a group (``claim_group``), and each generation's assignment
(``start_generation``, round-robin per topic over its subscribers). A strict topic's releases that a member's
heartbeat calls for are ``heartbeat_releases``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..errors import Conflict, NotFound
from ..image import MetadataImage
from ..image.key_order_history import open_parents
from ..image.key_orders import strict_history
from ..records import GroupCoordinatorAssigned, GroupGenerationStarted, GroupMember, KeyRangeReleased, Record
from .common import Result, check_name
from .key_order import give_up, release_parents

TopicPartition = tuple[str, int]


def group_assignment(image: MetadataImage, subscriptions: Mapping[str, Sequence[str]]) -> tuple[GroupMember, ...]:
    """Round-robin per topic over the members subscribed to it (``subscriptions``: member id -> topics), in
    member-id order; removed partitions are dropped, read-only ones stay assigned (they are read to their end)."""
    members = sorted(subscriptions)
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic_name in sorted({t for topics in subscriptions.values() for t in topics}):
        topic = image.topics.get(topic_name)
        if topic is None:
            continue
        subscribers = [m for m in members if topic_name in subscriptions[m]]
        live = [p.partition for p in topic.partitions if p.state != "removed"]
        for i, partition in enumerate(live):
            assigned[subscribers[i % len(subscribers)]].append((topic_name, partition))
    return tuple(GroupMember(m, tuple(assigned[m])) for m in members)


def claim_group(image: MetadataImage, group: str, node_id: int) -> Result:
    """Record ``node_id`` as ``group``'s coordinator, unless it already is."""
    check_name(group, "group")
    current = image.groups.get(group)
    reply = {"group": group, "coordinator_id": node_id}
    if current is not None and current.coordinator_id == node_id:
        return Result((), reply)
    return Result((GroupCoordinatorAssigned(group, node_id),), reply)


def start_generation(image: MetadataImage, group: str, subscriptions: Mapping[str, Sequence[str]]) -> Result:
    """Start ``group``'s next generation when the assignment its live members (``subscriptions``) and the
    topics' partitions call for differs from the current one; nothing when it does not."""
    check_name(group, "group")
    current = image.groups.get(group)
    desired = group_assignment(image, subscriptions)
    if current is not None and desired == current.members:
        return Result((), {"group": group, "generation": current.generation})
    generation = current.generation + 1 if current is not None else 1
    return Result((GroupGenerationStarted(group, generation, desired),), {"group": group, "generation": generation})


def heartbeat_releases(
    image: MetadataImage,
    group: str,
    topics: Iterable[str],
    committed: Iterable[tuple[str, int, int]],
    given_up: Iterable[tuple[str, int, int]],
) -> Result:
    """The releases a member's heartbeat calls for, over the strict ones of the ``topics`` it subscribes to:
    parents the group committed up to their seal (``committed``: topic, partition, offset as the member read
    them) or that were drained (``release_parents``), and parents it waited too long for that cannot be read
    to their seal (``given_up``: topic, epoch, partition; one that can be read is waited for: nothing
    recorded)."""
    by_topic: dict[str, dict[int, int]] = {}
    for name, partition, offset in committed:
        by_topic.setdefault(name, {})[partition] = offset
    records: list[Record] = []
    for name in sorted(set(topics) | set(by_topic)):
        history = strict_history(image.key_orders, name)
        if history is not None and open_parents(history, group):
            records += release_parents(image, group, name, by_topic.get(name, {})).records
    released = {(r.topic, r.epoch, r.partition) for r in records if isinstance(r, KeyRangeReleased)}
    for name, epoch, partition in given_up:
        if (name, epoch, partition) in released or strict_history(image.key_orders, name) is None:
            continue
        try:
            reason = f"group {group} waited its kfed.key.order.max.wait.ms"
            records += give_up(image, group, name, epoch, partition, reason).records
        except (Conflict, NotFound):
            continue  # readable (the group is to read it) or not an open parent: nothing to record
    released_now = [[r.topic, r.epoch, r.partition] for r in records if isinstance(r, KeyRangeReleased)]
    return Result(tuple(records), {"group": group, "released": released_now})
