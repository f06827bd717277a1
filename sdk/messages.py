"""Messages as the SDK hands them out: logical topic and partition, physical offset, and the cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple, overload

from confluent_kafka import KafkaError, Message

_error = Message.error
_topic = Message.topic
_partition = Message.partition


class Origin(NamedTuple):
    """Where a message belongs in the federation: one per logical partition, shared by its messages."""

    topic: str  # logical
    partition: int  # logical (-1: unknown, e.g. a message that never reached a partition)
    cluster_id: str | None


class FederatedMessage(tuple[Message, Origin]):
    """A confluent-kafka ``Message`` seen through the federation: ``topic()`` and ``partition()`` are the
    logical ones; ``offset()`` is the offset in the physical partition; ``cluster_id()`` says where.

    It is an immutable pair (message, ``Origin``) — a tuple, so that a whole consumed batch is wrapped by
    C code (``map`` over ``zip``) with no Python call per message; treat it as opaque and use the methods.
    """

    __slots__ = ()

    @classmethod
    def unsent(cls, topic: str, value: Any, headers: Any) -> FederatedMessage:
        """A message that never reached any cluster (for failed delivery reports)."""
        return _Unsent((None, Origin(topic, -1, None), value, headers))  # type: ignore[arg-type]  # 4-tuple

    def topic(self) -> str:
        return self[1].topic

    def partition(self) -> int:
        return self[1].partition

    def cluster_id(self) -> str | None:
        return self[1].cluster_id

    def origin(self) -> Origin:
        return self[1]

    def offset(self) -> int:
        offset = self[0].offset()
        return offset if offset is not None else -1

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

    def physical_topic(self) -> str | None:
        return self[0].topic()

    def physical_partition(self) -> int | None:
        return self[0].partition()

    def __len__(self) -> int:
        value = self.value()
        return len(value) if value is not None else 0

    def __repr__(self) -> str:
        return f"FederatedMessage({self.topic()}/{self.partition()}@{self.offset()} on {self.cluster_id()})"


class _Unsent(FederatedMessage):
    """(None, origin, value, headers): what a failed delivery report carries when nothing was sent."""

    __slots__ = ()

    def offset(self) -> int:
        return -1

    def value(self) -> Any:
        return self[2]  # type: ignore[misc]  # the 4-tuple's extra items

    def key(self) -> Any:
        return None

    def headers(self) -> Any:
        return self[3]  # type: ignore[misc]

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)

    def error(self) -> KafkaError | None:
        return None

    def physical_topic(self) -> str | None:
        return None

    def physical_partition(self) -> int | None:
        return None


class MessageBatch(Sequence[FederatedMessage]):
    """What ``FederatedConsumer.consume`` returns: a read-only sequence of ``FederatedMessage`` (``list(batch)``
    makes a list of it).

    A message is wrapped when it is read (iterated or indexed), not when the batch is made. A wrapper the
    application drops after use is then freed at once; made up front, as a list of wrappers would be, it
    outlives the next ``consume()`` beside its message, and the cyclic garbage collector walks twice the
    objects a raw consumer makes (py-spy: the collector was a third of the federated consumer's reading
    thread, against a quarter of a raw one's).
    """

    __slots__ = ("_messages", "_origins")

    def __init__(self, messages: list[Message], origins: list[Origin]) -> None:
        self._messages = messages  # as the physical consumers returned them
        self._origins = origins  # the logical partition of each

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[FederatedMessage]:
        return map(FederatedMessage, zip(self._messages, self._origins, strict=True))

    @overload
    def __getitem__(self, index: int) -> FederatedMessage: ...
    @overload
    def __getitem__(self, index: slice) -> MessageBatch: ...
    def __getitem__(self, index: int | slice) -> FederatedMessage | MessageBatch:
        if isinstance(index, slice):
            return MessageBatch(self._messages[index], self._origins[index])
        return FederatedMessage((self._messages[index], self._origins[index]))

    def __add__(self, other: MessageBatch) -> MessageBatch:
        if not isinstance(other, MessageBatch):
            return NotImplemented
        if not other._messages:
            return self
        if not self._messages:
            return other
        return MessageBatch(self._messages + other._messages, self._origins + other._origins)

    def __repr__(self) -> str:
        return f"MessageBatch({len(self)} messages)"


EMPTY_BATCH: Final = MessageBatch([], [])


def wrap_batch(batch: list[Message], origins: dict[tuple[str, int], Origin]) -> MessageBatch:
    """Place what one physical consumer returned: ``origins`` maps its owned (physical topic, physical
    partition) to their logical partition. Events (``error()`` set) other than partition EOF are handed out
    when their partition is owned; EOF events and messages of partitions not in ``origins`` (released since
    they were fetched) are dropped.

    The usual batch — only messages, all of owned partitions — is placed without a Python call per
    message; anything else takes the per-message path."""
    if not any(map(_error, batch)):
        physical = zip(map(_topic, batch), map(_partition, batch), strict=True)
        lookup: Callable[[tuple[str | None, int | None]], Origin] = origins.__getitem__  # type: ignore[assignment]  # messages have both
        try:
            return MessageBatch(batch, list(map(lookup, physical)))
        except KeyError:
            pass  # a partition released since it was fetched: drop its messages below
    kept: list[Message] = []
    placed: list[Origin] = []
    get = origins.get
    for msg in batch:
        error = msg.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            continue
        origin = get((msg.topic(), msg.partition()))  # type: ignore[arg-type]  # None for client-level events
        if origin is not None:
            kept.append(msg)
            placed.append(origin)
    return MessageBatch(kept, placed)
