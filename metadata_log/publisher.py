"""How effects leave the core: publishers get ``on_update(delta, image)`` (Kafka's ``MetadataPublisher``).

Whoever advances an image (the Raft state machine on a controller, ``LogFollower`` in an agent, the SDK or a
Spark job) hands each advance to its subscribed publishers: the HTTP read model, the agent's reconciler,
the producer's routes. A publisher subscribed late first gets a catch-up: a snapshot delta from the empty
image to the current one, then every later update, none missed and none twice. A publisher learns what
changed from ``delta.changes`` (topics created, deleted and changed, clusters and leaders changed), never by
reading the records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .image import EMPTY_IMAGE, MetadataChanges, MetadataImage, Touched, changes_between
from .records import Record

__all__ = ["LogDelta", "MetadataPublisher", "Publishers"]

log = logging.getLogger(__name__)


class LogDelta:
    """What took ``base`` to the published image, and what it changed (``changes``).

    Either committed ``records``, at offsets ``first_offset``, ``first_offset + 1``, ... (a batch is never
    split), or, with ``snapshot``, an image loaded whole (a node's dump, a snapshot from another node, the
    catch-up of a late subscriber): no records, and the log continues after the new image's offset.

    Made by ``committed`` or ``replaced``. ``changes`` is settled on first read, so that a publisher that reads
    only the records (the controller's read model) costs nothing more: from what replay ``touched``, or for a
    snapshot by comparing the two images."""

    __slots__ = ("_changes", "_image", "_touched", "base", "records", "snapshot")

    def __init__(
        self, base: MetadataImage, records: Sequence[Record], snapshot: bool, image: MetadataImage, touched: Touched
    ) -> None:
        self.base = base
        self.records = records
        self.snapshot = snapshot
        self._image = image
        self._touched = touched  # of the records' replay (empty for a snapshot)
        self._changes: MetadataChanges | None = None

    @classmethod
    def committed(
        cls, base: MetadataImage, records: Sequence[Record], image: MetadataImage, touched: Touched
    ) -> LogDelta:
        """The delta of ``records`` applied to ``base``, making ``image``, their replay having ``touched``."""
        return cls(base, records, False, image, touched)

    @classmethod
    def replaced(cls, base: MetadataImage, image: MetadataImage) -> LogDelta:
        """The snapshot delta of ``image`` loaded whole over ``base``."""
        return cls(base, (), True, image, Touched())

    @property
    def first_offset(self) -> int:
        """The offset of ``records[0]``."""
        return self.base.offset + 1

    @property
    def changes(self) -> MetadataChanges:
        """What differs between ``base`` and the published image (see ``MetadataChanges``)."""
        changes = self._changes
        if changes is None:  # the images are immutable: two threads settling at once find the same changes
            changes = self._changes = self._settle()
        return changes

    def _settle(self) -> MetadataChanges:
        if self.snapshot:
            return changes_between(self.base, self._image)
        return self._touched.settle(self.base, self._image)

    def __repr__(self) -> str:
        kind = "snapshot" if self.snapshot else f"{len(self.records)} records"
        return f"LogDelta(base offset {self.base.offset}, {kind})"


class MetadataPublisher(Protocol):
    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        """Called after each advance, in order, on the thread that advanced the image: keep it short."""


class Publishers:
    """The publishers subscribed to one line of images, and the last image published to them.

    ``publish`` and ``subscribe`` take the same lock, so a subscriber's catch-up is to exactly the image
    after which its first update starts (re-entrant: a publisher may subscribe another from ``on_update``).
    A publisher that raises is logged, not unsubscribed: the next update still reaches it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._subscribed: tuple[MetadataPublisher, ...] = ()
        self._image = EMPTY_IMAGE

    def subscribe(self, publisher: MetadataPublisher) -> None:
        """Add ``publisher``; it first gets the catch-up from the empty image, unless nothing was published yet."""
        with self._lock:
            if self._image is not EMPTY_IMAGE:
                _deliver(publisher, LogDelta.replaced(EMPTY_IMAGE, self._image), self._image)
            self._subscribed += (publisher,)

    def publish(self, image: MetadataImage, make_delta: Callable[..., LogDelta], *args: Any) -> None:
        """Publish ``image`` and the delta that made it, made by ``make_delta(*args)`` only when a publisher is
        subscribed: a Raft follower builds the records of a command from its runs for nobody else."""
        with self._lock:
            self._image = image
            if self._subscribed:
                made = make_delta(*args)
                for publisher in self._subscribed:
                    try:
                        publisher.on_update(made, image)
                    except Exception:  # one broken publisher must not stop the others, nor the image's advance
                        log.exception("publisher %r failed", publisher)


def _deliver(publisher: MetadataPublisher, delta: LogDelta, image: MetadataImage) -> None:
    try:
        publisher.on_update(delta, image)
    except Exception:  # one broken publisher must not stop the others, nor whoever advances the image
        log.exception("publisher %r failed", publisher)
