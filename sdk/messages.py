"""Messages as the SDK hands them out: confluent-kafka ``Message`` objects whose ``topic()`` and ``partition()``
are the logical ones and whose ``offset()`` is the offset in the physical partition.

The physical consumers and producers return messages labelled with the physical topic and partition. The
SDK relabels those very objects (``label``, ``place_batch``) through ``sdk._speedups``, a small C module, so
the application gets the objects confluent-kafka made: no object and no Python call per message, and a
federated read loop costs what a raw one does: a wrapper per message would cost a read loop a large part of its
speed (the sdk rows of BENCHMARKS.md measure the federated loop against the raw one).

The C module writes two fields of confluent-kafka's ``Message`` struct. It is not told a layout: at import,
``_find_fields`` finds the fields' byte offsets in a probe message, ``_labels_work`` checks them through the
public getters, and only then are labels written in place (``IN_PLACE``). When the module was not built (no C
compiler at install) or the check fails (a confluent-kafka whose ``Message`` is laid out otherwise), every
message is wrapped in a ``FederatedMessage`` instead: the same methods, slower, and a warning says so once.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Final, NamedTuple, cast

from confluent_kafka import KafkaError, Message

from metadata_log.errors import KfedError
from metadata_log.image import MetadataImage, PartitionLocation

log = logging.getLogger(__name__)


class Origin(NamedTuple):
    """Where a message belongs in the federation: one per logical partition, shared by its messages. The C
    module reads items 0 and 1."""

    topic: str  # logical
    partition: int  # logical
    cluster_id: str


def placement_in(image: MetadataImage, message: Message) -> PartitionLocation | None:
    """Where the data of a message the SDK handed out lives, from ``image``: a logical partition keeps the
    placement it was created with. None for a message of no partition, or of a topic ``image`` lacks."""
    topic, partition = image.topics.get(message.topic() or ""), message.partition()
    if topic is None or partition is None or not 0 <= partition < len(topic.partitions):
        return None
    p = topic.partitions[partition]
    return PartitionLocation(p.cluster_id, p.physical_topic, p.physical_partition)


Slots = dict[str, list[Origin | None]]
"""One physical cluster's owned partitions: physical topic -> the origin of each physical partition (a list
indexed by physical partition, None where not owned). The C module reads it as it is."""


def set_slot(slots: Slots, physical_topic: str, physical_partition: int, origin: Origin | None) -> None:
    """Own (``origin``) or release (None) one physical partition in ``slots``."""
    by_partition = slots.setdefault(physical_topic, [])
    if len(by_partition) <= physical_partition:
        by_partition.extend([None] * (physical_partition + 1 - len(by_partition)))
    by_partition[physical_partition] = origin
    if not any(by_partition):
        del slots[physical_topic]


def origin_in(slots: Slots, physical_topic: str | None, physical_partition: int | None) -> Origin | None:
    """The origin ``slots`` gives a physical partition, or None (not owned, or a message of no partition)."""
    by_partition = slots.get(physical_topic) if physical_topic is not None else None
    if by_partition is None or physical_partition is None or not 0 <= physical_partition < len(by_partition):
        return None
    return by_partition[physical_partition]


# -- the fallback: a wrapper per message ------------------------------------------------------------------


class FederatedMessage(tuple[Message, Origin]):
    """What the SDK hands out instead of a relabelled ``Message`` when ``IN_PLACE`` is off: a pair
    (physical message, ``Origin``) with ``Message``'s reading methods, ``topic()`` and ``partition()`` the
    logical ones. Treat it as a ``Message``."""

    __slots__ = ()

    def topic(self) -> str:
        return self[1].topic

    def partition(self) -> int | None:
        partition = self[1].partition
        return partition if partition >= 0 else None

    def offset(self) -> int | None:
        return self[0].offset()

    def value(self) -> Any:
        return self[0].value()

    def key(self) -> Any:
        return self[0].key()

    def headers(self) -> Any:
        return self[0].headers()

    def timestamp(self) -> tuple[int, int]:
        return self[0].timestamp()

    def error(self) -> KafkaError | None:
        return self[0].error()

    def leader_epoch(self) -> int | None:
        return self[0].leader_epoch()

    def latency(self) -> float | None:
        return self[0].latency()

    def __len__(self) -> int:
        value = self.value()
        return len(value) if value is not None else 0

    def __repr__(self) -> str:
        return f"FederatedMessage({self.topic()}/{self.partition()}@{self.offset()})"


def unsent(topic: str, value: Any, headers: Any) -> Message:
    """A message that never reached any cluster, for a failed delivery report: no partition, no offset."""
    return Message(topic=topic, value=value, headers=headers)


# -- labels written in place ------------------------------------------------------------------------------

_PROBE_PARTITION: Final = 0x5EEDCAFE  # int32 values no other field of a probe message holds
_PROBE_OFFSET: Final = 0x0BADF00D
_POINTER: Final = ctypes.sizeof(ctypes.c_void_p)
_INT32: Final = 4


class _LayoutNotFound(KfedError):
    pass


def _only(memory: bytes, pattern: bytes, align: int, what: str) -> int:
    found = [at for at in range(0, len(memory) - len(pattern) + 1, align) if memory[at : at + len(pattern)] == pattern]
    if len(found) != 1:
        raise _LayoutNotFound(f"the {what} field of a confluent_kafka.Message is at {len(found)} places, not one")
    return found[0]


def _find_fields() -> tuple[int, int, int]:
    """The byte offsets of a ``Message``'s topic (object), partition (int32) and error (object) fields: where a
    probe message holds the very objects and the value it was made with."""
    if sys.implementation.name != "cpython":
        raise _LayoutNotFound("object addresses are CPython's")
    topic, error = "kfed-layout-probe", KafkaError(KafkaError._PARTITION_EOF)
    probe = Message(topic=topic, partition=_PROBE_PARTITION, offset=_PROBE_OFFSET, error=error)
    if probe.topic() is not topic or probe.error() is not error or probe.partition() != _PROBE_PARTITION:
        raise _LayoutNotFound("a Message does not keep the topic and error objects it is made with")
    memory = ctypes.string_at(id(probe), type(probe).__basicsize__)
    return (
        _only(memory, id(topic).to_bytes(_POINTER, sys.byteorder), _POINTER, "topic"),
        _only(memory, _PROBE_PARTITION.to_bytes(_INT32, sys.byteorder), _INT32, "partition"),
        _only(memory, id(error).to_bytes(_POINTER, sys.byteorder), _POINTER, "error"),
    )


def _labels_work(relabel: ModuleType) -> bool:
    """Whether the configured module labels messages as the public getters then read them, leaving every other
    field and the references it drops as they were."""
    # made at run time: a literal would be interned, and interned strings keep no count on Python >= 3.12
    physical, logical = "-".join(("kfed", "physical", "probe")), "-".join(("kfed", "logical", "probe"))
    origin = Origin(logical, 7, "c")
    fields = dict(offset=_PROBE_OFFSET, key=b"k", value=b"v", headers=[("h", b"1")], timestamp=(1, 99), leader_epoch=3)
    msg = Message(topic=physical, partition=2, **fields)  # type: ignore[arg-type]  # the constructor takes them
    refs = sys.getrefcount(physical)
    relabel.relabel(msg, origin)
    relabelled = msg.topic() == logical and msg.partition() == 7 and sys.getrefcount(physical) == refs - 1
    unchanged = (msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp(), msg.leader_epoch(), msg.error())
    slots: Slots = {physical: [None, None, origin]}
    failed = Message(topic=physical, partition=2, error=KafkaError(KafkaError._PARTITION_EOF))
    refused = not relabel.relabel_batch([Message(topic=physical, partition=2), failed], slots)
    batch = [Message(topic=physical, partition=2, offset=n) for n in range(3)]
    placed = relabel.relabel_batch(batch, slots) and [(m.topic(), m.partition(), m.offset()) for m in batch] == [
        (logical, 7, n) for n in range(3)
    ]
    return (
        relabelled
        and unchanged == (*fields.values(), None)
        and refused
        and (failed.topic(), failed.partition()) == (physical, 2)
        and placed
    )


def _in_place() -> ModuleType | None:
    """The C module, configured and checked; None (with the reason logged) when labels cannot be written."""
    try:
        from . import _speedups  # a C extension (sdk/_speedups.c), built at install when it can be
    except ImportError:
        log.warning("sdk: messages are wrapped, not relabelled: sdk._speedups is not importable (no C compiler)")
        return None
    try:
        _speedups.configure(Message, *_find_fields())
        if _labels_work(_speedups):
            return _speedups
        reason = "a probe message did not read back as labelled"
    except (_LayoutNotFound, ValueError) as e:
        reason = str(e)
    log.warning("sdk: messages are wrapped, not relabelled: %s", reason)
    return None


_labels: Final = _in_place()  # the C module when labels are written in place, else None
IN_PLACE: Final = _labels is not None
"""Whether messages are relabelled in place (else wrapped in ``FederatedMessage``)."""


def label(msg: Message, origin: Origin) -> Message:
    """``msg`` with the logical topic and partition of ``origin`` (relabelled in place, or wrapped)."""
    if _labels is not None:
        return cast(Message, _labels.relabel(msg, origin))
    return cast(Message, FederatedMessage((msg, origin)))


Report = Callable[[KafkaError | None, Message], None]
"""A delivery callback as confluent-kafka calls it."""


def reporter(callback: Report | None, origin: Origin, on_error: Report) -> Report:
    """A physical producer's delivery callback: a delivered message goes to ``callback`` (if any) labelled with
    ``origin``; a failed one to ``on_error`` as it is. In C when labels are written in place."""
    if _labels is not None:
        return cast(Report, _labels.Reporter(callback, origin, on_error))

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            on_error(err, msg)
        elif callback is not None:
            callback(None, label(msg, origin))

    return report


def place_batch(batch: list[Message], slots: Slots) -> list[Message]:
    """What one physical consumer returned, labelled: ``slots`` is its cluster's owned partitions. Events
    (``error()`` set) other than partition EOF are handed out when their partition is owned; EOF events and
    messages of partitions not in ``slots`` (released since they were fetched) are dropped. Order is kept.

    The usual batch (only messages, all of owned partitions) is relabelled in place as it is, in C."""
    if _labels is not None and _labels.relabel_batch(batch, slots):
        return batch
    return [label(msg, origin) for msg, origin in _placed(batch, slots)]


def _placed(batch: Iterable[Message], slots: Slots) -> Iterable[tuple[Message, Origin]]:
    for msg in batch:
        error = msg.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            continue
        origin = origin_in(slots, msg.topic(), msg.partition())
        if origin is not None:
            yield msg, origin
