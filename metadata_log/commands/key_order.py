"""Pure commands of strict key order (docs/KEY_ORDER.md): validate against the image's key-order map, return
records plus a reply. Where an epoch starts (decision 2):

- ``topics.create_topic(..., key_order="strict")`` and ``change_key_order``: the first epoch, in the same batch;
- ``plan_epochs`` after a planned change (a partition's or a cluster's state, shrink, decommission), appended
  by that command to its own batch; and from the leader's loop, after a fence, and to start the epoch of an
  expand once the new partitions have leaders;
- ``record_seals`` (the agents' measurements), ``release_parents`` (the group coordinator) and ``give_up``
  (a member that waited ``kfed.key.order.max.wait.ms``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from ..errors import Conflict, InvalidRequest, NotFound
from ..image import MetadataImage, TopicImage, apply, is_writable
from ..image.key_order_history import (
    KeyOrderError,
    KeyOrderTopic,
    check_may_advance,
    may_give_up,
    next_change,
    open_parents,
    pending_seals,
    releasable,
    strict_topic,
)
from ..image.key_orders import epoch_records, strict_history
from ..keymap import MAX_STRICT_PARTITIONS
from ..records import (
    KEY_ORDERS,
    KeyOrder,
    KeyOrderRecord,
    KeyOrderSealed,
    KeyRangeReleased,
    Record,
    TopicKeyOrderChanged,
)
from ..views import key_order_view
from .common import Result, check_name, existing_topic

MAX_SEALS_PER_REPORT: Final = MAX_STRICT_PARTITIONS
"""Seals one report may carry: a change has at most one giver per partition of the map."""

MAX_REASON_CHARS: Final = 500


def check_key_order(value: Any, field_name: str = "key_order") -> KeyOrder:
    if value not in KEY_ORDERS:
        raise InvalidRequest(field_name, f"{field_name} must be one of {', '.join(KEY_ORDERS)}")
    key_order: KeyOrder = value  # narrowed by the membership check
    return key_order


def _strict(image: MetadataImage, name: str) -> tuple[TopicImage, KeyOrderTopic]:
    topic = existing_topic(image, name)
    history = strict_history(image.key_orders, name)
    if history is None:
        raise Conflict(f"topic {name!r} is not strict (key_order none)", field="topic")
    return topic, history


def unreadable_partitions(image: MetadataImage, topic: TopicImage) -> set[int]:
    """Partitions that cannot be measured (nor read) now: on a fenced or unknown cluster, or removed."""
    out = set()
    for p in topic.partitions:
        cluster = image.clusters.get(p.cluster_id)
        if cluster is None or cluster.fenced or p.state == "removed":
            out.add(p.partition)
    return out


def drained_partitions(topic: TopicImage) -> set[int]:
    """Removed partitions: drained before removal (every group reading the topic committed them to their end,
    or their data expired), so nothing of theirs is left to wait for."""
    return {p.partition for p in topic.partitions if p.state == "removed"}


def routable_partitions(image: MetadataImage, topic: TopicImage, mapped: Collection[int] = ()) -> set[int]:
    """The partitions a strict topic's keys should be routed to: effectively writable, and either already in
    the map (``mapped``) or with a known leader, so that an expand joins the map once its partitions can
    take writes, while a partition of the map whose leader is briefly unknown keeps its keys."""
    out = set()
    for p in topic.partitions:
        if not is_writable(image, p):
            continue
        cluster = image.clusters[p.cluster_id]
        if p.partition in mapped or (p.physical_topic, p.physical_partition) in cluster.leaders:
            out.add(p.partition)
    return out


def _reply(image: MetadataImage, name: str, records: list[KeyOrderRecord]) -> dict[str, Any]:
    """The topic's key order as it will be once its key-order ``records`` are applied."""
    return {"name": name, **key_order_view(apply(image, records).key_orders, name)}


def first_epoch(name: str, partitions: Collection[int], last_epoch: int, cause: str) -> list[KeyOrderRecord]:
    if len(partitions) > MAX_STRICT_PARTITIONS:
        raise Conflict(
            f"a strict topic routes keys to at most {MAX_STRICT_PARTITIONS} partitions; {name!r} has "
            f"{len(partitions)} writable",
            field="key_order",
        )
    history = strict_topic(partitions, cause, epoch=last_epoch + 1)
    return [TopicKeyOrderChanged(name, "strict"), *epoch_records(name, history.changes[0])]


def change_key_order(image: MetadataImage, name: str, key_order: Any) -> Result:
    """The operator's switch. To strict: the first epoch of a new strict period over the partitions keys can
    be routed to now (its epochs continue after an earlier period's). To none: producers stop stamping and
    consumers stop holding back. The same mode again changes nothing."""
    topic = existing_topic(image, name)
    order = check_key_order(key_order)
    current = image.key_orders.get(name)
    if (current.key_order if current is not None else "none") == order:
        return Result((), {"name": name, **key_order_view(image.key_orders, name)})
    if order == "none":
        records: list[KeyOrderRecord] = [TopicKeyOrderChanged(name, "none")]
    else:
        partitions = routable_partitions(image, topic)
        if not partitions:
            raise Conflict(
                f"topic {name!r} has no writable partition with a leader to route keys to", field="key_order"
            )
        last = current.last_epoch if current is not None else 0
        records = first_epoch(name, partitions, last, "switched to strict")
    return Result(tuple(records), _reply(image, name, records))


def plan_epoch(image: MetadataImage, name: str, cause: str) -> Result:
    """The next epoch of a strict topic when the partitions keys should go to (``routable_partitions``) differ
    from its map; no records when they do not, when there is none to route to (producers queue), or while a
    seal of the latest epoch can still be measured (reply ``waiting_for_seals``: the leader's loop retries)."""
    topic, history = _strict(image, name)
    desired = routable_partitions(image, topic, history.map.partitions())
    if not desired or desired == history.map.partitions():
        return Result((), {"name": name, "key_epoch": history.epoch})
    if len(desired) > MAX_STRICT_PARTITIONS:
        raise Conflict(f"a strict topic routes keys to at most {MAX_STRICT_PARTITIONS} partitions", field="topic")
    try:
        check_may_advance(history, unreadable_partitions(image, topic))
    except KeyOrderError as e:
        return Result((), {"name": name, "key_epoch": history.epoch, "waiting_for_seals": str(e)})
    change = next_change(history, desired, cause[:MAX_REASON_CHARS])
    if change is None:  # pragma: no cover - desired differs from the map's partitions
        return Result((), {"name": name, "key_epoch": history.epoch})
    records = epoch_records(name, change)
    return Result(tuple(records), _reply(image, name, records))


def plan_epochs(image: MetadataImage, cause: str) -> list[Record]:
    """``plan_epoch`` of every strict topic, for the image after a change of clusters or partitions: the
    records to append to that change's batch (or to propose from the leader's loop)."""
    records: list[Record] = []
    for name in sorted(image.key_orders):
        if strict_history(image.key_orders, name) is not None and name in image.topics:
            records += plan_epoch(image, name, cause).records
    return records


def with_epochs(image: MetadataImage, result: Result, cause: str) -> Result:
    """A planned change's result (a partition's or a cluster's state, shrink, decommission) with the epochs it
    starts appended to its batch, so that no reader sees the change without its routing."""
    if not image.key_orders:  # no topic was ever strict: nothing to plan
        return result
    after = apply(image, result.records)
    return Result((*result.records, *plan_epochs(after, cause)), result.reply)


def seals_to_measure(image: MetadataImage, cluster_id: str) -> list[tuple[str, int, int]]:
    """``(topic, epoch, partition)`` of each pending seal on ``cluster_id``: what its agent measures, once the
    grace has passed since it applied the epoch (docs/KEY_ORDER.md, decision 3)."""
    out = []
    for name in sorted(image.key_orders):
        history = strict_history(image.key_orders, name)
        topic = image.topics.get(name)
        if history is None or topic is None:
            continue
        for p in pending_seals(history):
            if p < len(topic.partitions) and topic.partitions[p].cluster_id == cluster_id:
                out.append((name, history.epoch, p))
    return out


def record_seals(image: MetadataImage, name: str, epoch: int, end_offsets: Mapping[int, int]) -> Result:
    """An agent's measured end offsets (logical partition -> offset) of the pending seals of ``epoch``. Seals
    already recorded are skipped (a retried report); a report for an epoch that is no longer the latest is
    refused (its seals were abandoned when the next epoch started)."""
    _, history = _strict(image, name)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch != history.epoch:
        raise Conflict(
            f"topic {name!r} is at epoch {history.epoch}; seals of epoch {epoch} are no longer taken", field="epoch"
        )
    if len(end_offsets) > MAX_SEALS_PER_REPORT:
        raise InvalidRequest("seals", f"at most {MAX_SEALS_PER_REPORT} seals per report")
    pending = set(pending_seals(history))
    records: list[KeyOrderRecord] = []
    for partition, end in sorted(end_offsets.items()):
        if not isinstance(end, int) or isinstance(end, bool) or end < 0:
            raise InvalidRequest(f"seals.{partition}", "an end offset is an integer >= 0")
        if (epoch, partition) in history.seals:
            continue
        if partition not in pending:
            raise Conflict(
                f"partition {partition} of {name!r} gave no slots away in epoch {epoch}", field=f"seals.{partition}"
            )
        records.append(KeyOrderSealed(name, epoch, partition, end))
    return Result(tuple(records), _reply(image, name, records) if records else {"name": name})


def release_parents(
    image: MetadataImage,
    group: str,
    name: str,
    committed: Mapping[int, int],
    log_start: Mapping[int, int] | None = None,
) -> Result:
    """The group coordinator: a release for each parent ``group`` has committed up to its seal (``committed``:
    logical partition -> the group's committed offset there, as the agents measure it)."""
    check_name(group, "group")
    topic, history = _strict(image, name)
    parents = releasable(history, group, committed, log_start, drained_partitions(topic))
    records = tuple(KeyRangeReleased(group, name, epoch, partition, False, "") for epoch, partition in parents)
    return Result(records, {"name": name, "group": group, "released": [list(p) for p in parents]})


def give_up(image: MetadataImage, group: str, name: str, epoch: int, partition: int, reason: str) -> Result:
    """A member waited too long for parent ``(epoch, partition)``: release it broken, if it cannot be read to
    its seal (``may_give_up``); a Conflict otherwise (the group is to read it). Again for a parent already
    released: no records."""
    check_name(group, "group")
    topic, history = _strict(image, name)
    if (group, epoch, partition) in history.releases:
        return Result((), {"name": name, "group": group, "released": []})
    if (epoch, partition) not in open_parents(history, group):
        raise NotFound(f"epoch {epoch} of {name!r} moved nothing away from partition {partition}", field="partition")
    if partition in drained_partitions(topic):  # read to its end before it was removed: no break
        record = KeyRangeReleased(group, name, epoch, partition, False, "drained and removed")
        return Result((record,), {"name": name, "group": group, "released": [[epoch, partition]], "broken": False})
    if not may_give_up(history, (epoch, partition), unreadable_partitions(image, topic)):
        raise Conflict(
            f"partition {partition} of {name!r} can be read to its seal of epoch {epoch}: the group is to read it",
            field="partition",
        )
    record = KeyRangeReleased(group, name, epoch, partition, True, str(reason)[:MAX_REASON_CHARS])
    return Result((record,), {"name": name, "group": group, "released": [[epoch, partition]], "broken": True})
