"""``FederatedConsumer``: consume logical topics as one consumer group, coordinated by the kfed quorum.

Configured like confluent-kafka's ``Consumer`` (``group.id`` required), with ``kfed.controllers`` instead
of ``bootstrap.servers``; other keys go to the underlying consumers (one per physical cluster). The group
is coordinated by the quorum leader (not by the brokers): a heartbeat thread reports which logical
partitions this member consumes and learns its assignment; the partitions themselves are read with
``assign()`` from the physical clusters, and offsets are committed there, under the same group id.

Ownership is exclusive: revoked partitions are committed (with ``enable.auto.commit``, the default) and
dropped before they are reported released, a new partition is started only when the coordinator says no
other member still consumes it, and a member that cannot heartbeat for ``kfed.session.timeout.ms``
stops consuming everything until it can. Read-only partitions stay assigned until read to their end;
removed ones are dropped. All confluent-kafka calls happen on the thread that calls ``poll``/``consume``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from confluent_kafka import OFFSET_STORED, Consumer, KafkaException, Message, TopicPartition

from metadata_client.client import ControllerClient
from metadata_client.follower import FollowerError, LogFollower
from metadata_client.holdback import DEFAULT_MAX_HELD, DEFAULT_MAX_WAIT_MS
from metadata_log.errors import KfedError
from metadata_log.image import MetadataImage, PartitionImage, PartitionLocation

from .brokers import BrokerUnknown, broker_at
from .config import check_kafka_settings, ms_setting, split_config
from .key_order import KeyOrderMember
from .messages import Origin, Slots, origin_in, place_batch, placement_in, set_slot
from .transactions import GroupMetadata

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS: Final = 10_000
DEFAULT_MAX_POLL_INTERVAL_MS: Final = 300_000
HEARTBEAT_S: Final = 0.5
CLIENT_DEADLINE_S: Final = 2.0
"""How long one call to the quorum (heartbeat, leave) may retry over the controllers."""
STALLED_START_S: Final = 2.0
"""A partition started this long ago with no fetch response yet is assigned again. librdkafka (2.16; its issue
5586) never retries assign()'s committed-offset lookup after a request-level NOT_COORDINATOR, which Apache Kafka
answers while a group coordinator loads or moves (a new cluster's first group, a broker restart): the partition's
fetcher would never start. A new assign() looks the offset up again."""
COMMITTED_TIMEOUT_S: Final = 2.0
"""How long a partition's start waits for the group's commit, on a broker that needs it read here."""
LogicalPartition = tuple[str, int]
PartitionsCallback = Callable[["FederatedConsumer", list[LogicalPartition]], None]


class FederatedConsumer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        client_config = split_config(config)
        controllers, access, cfg = client_config.controllers, client_config.access, client_config.kafka
        self.group = cfg.get("group.id")
        if not self.group:
            raise ValueError("config needs 'group.id'")
        # librdkafka checks the settings it is passed (the probe below); these are taken out first
        self._session_timeout_ms = ms_setting(cfg, "kfed.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS, minimum=1)
        # An application that stops polling (stuck, or its thread died) must not keep its partitions:
        # past this, the heartbeat thread leaves the group; the next poll joins again.
        self._max_poll_interval_s = (
            ms_setting(cfg, "max.poll.interval.ms", DEFAULT_MAX_POLL_INTERVAL_MS, minimum=1) / 1000
        )
        self._last_poll = time.monotonic()
        # Auto commit is done here, from what the application was handed: librdkafka's own would also count
        # messages still in this consumer's buffer, which a revocation drops (and the next owner would skip).
        auto_commit = str(cfg.pop("enable.auto.commit", True)).lower()
        if auto_commit not in ("true", "1", "false", "0"):
            raise ValueError(
                f"invalid value {auto_commit!r} for configuration property 'enable.auto.commit': "
                "true or false is needed"
            )
        self._auto_commit = auto_commit in ("true", "1")
        self._auto_commit_s = ms_setting(cfg, "auto.commit.interval.ms", 5000) / 1000
        self._last_auto_commit = time.monotonic()
        cfg.pop("enable.auto.offset.store", None)
        # strict key order: records of moved key ranges are held back (sdk/key_order.py)
        on_order_break = cfg.pop("on_order_break", None)
        if on_order_break is not None and not callable(on_order_break):
            raise ValueError("invalid value for configuration property 'on_order_break': a callable is needed")
        self._key_order = KeyOrderMember(
            str(self.group),
            ms_setting(cfg, "kfed.key.order.max.held", DEFAULT_MAX_HELD, minimum=1),
            ms_setting(cfg, "kfed.key.order.max.wait.ms", DEFAULT_MAX_WAIT_MS),
            on_order_break,
        )
        # Tansu ignores max.partition.fetch.bytes: without a short queue back-off librdkafka waits 1 s per cycle.
        self._reset_to_earliest = str(cfg.get("auto.offset.reset", "")).lower() in ("earliest", "smallest", "beginning")
        self._physical_config = {
            "enable.metrics.push": False,
            "fetch.queue.backoff.ms": 10,
            **cfg,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
        check_kafka_settings(Consumer, self._physical_config)  # invalid settings fail here, as confluent-kafka's
        self._follower = LogFollower(controllers, wait_ms=2000, access=access, topics=client_config.topics)
        try:
            self._follower.poll(0)
        except FollowerError as e:  # like bootstrap.servers: retried in the background
            log.warning("no metadata yet (%s); following the log in the background", e)
        self._follower.start()
        self._client = ControllerClient(controllers, deadline_s=CLIENT_DEADLINE_S, access=access)
        self._consumers: dict[str, Consumer] = {}
        self._owned: dict[LogicalPartition, PartitionLocation] = {}
        self._slots: dict[str, Slots] = {}  # per cluster: the logical origin of every owned partition there
        self._topics: list[str] = []
        self._member_id: str | None = None
        self._reply: dict[str, Any] | None = None
        self._reply_lock = threading.Lock()
        self._last_heartbeat_ok = time.monotonic()
        self._beat_now = threading.Event()
        self._closed = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        # what _apply_assignment last acted on (reply, image, cut off): the same inputs change nothing
        self._applied: tuple[object, object, bool] | None = None
        self._next_consumer = 0
        self._unfetched: dict[LogicalPartition, float] = {}  # started, no fetch response yet: since when
        self._starts: dict[LogicalPartition, TopicPartition] = {}  # where each owned partition was started
        self._stalls_checked = 0.0
        self._on_assign: PartitionsCallback | None = None
        self._paused: set[LogicalPartition] = set()  # fetching paused: too many records held back
        self._on_revoke: PartitionsCallback | None = None

    # -- group membership ----------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Join the group for these logical topics (replaces an earlier subscription).

        ``on_assign(consumer, partitions)`` runs after this member started consuming logical partitions;
        ``on_revoke(consumer, partitions)`` before it stops (its offsets are committed after it returns,
        with auto commit). Both run on the thread that calls ``poll``/``consume``.
        """
        self._topics = list(topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        try:  # their metadata (the client holds what it uses); on failure, the follower's polls retry it
            self._follower.follow(self._topics)
        except FollowerError as e:
            log.warning("no metadata of %s yet (%s)", self._topics, e)
        self._heartbeat()
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="kfed-group", daemon=True)
            self._heartbeat_thread.start()

    def _heartbeat(self) -> bool:
        owned = [list(tp) for tp in list(self._owned)]
        body = {
            "member_id": self._member_id,
            "topics": self._topics,
            "owned": owned,
            "session_timeout_ms": self._session_timeout_ms,
            **self._key_order.heartbeat_fields(),
        }
        try:
            reply = self._client.post(f"/v1/groups/{self.group}/heartbeat", body)
        except KfedError as e:
            log.warning("group %s: heartbeat failed: %s", self.group, e)
            return False
        with self._reply_lock:
            self._reply = reply
            self._member_id = reply["member_id"]
            self._last_heartbeat_ok = time.monotonic()
        return True

    def _heartbeat_loop(self) -> None:
        left = False
        while not self._closed.is_set():
            self._beat_now.wait(HEARTBEAT_S)
            self._beat_now.clear()
            if self._closed.is_set():
                return
            if time.monotonic() - self._last_poll > self._max_poll_interval_s:
                if not left and self._member_id is not None:
                    log.warning(
                        "group %s: no poll for %.0f s: leaving the group", self.group, self._max_poll_interval_s
                    )
                    try:
                        self._client.post(f"/v1/groups/{self.group}/leave", {"member_id": self._member_id})
                    except KfedError as e:
                        log.warning("group %s: leave failed (%s); the session will expire", self.group, e)
                    with self._reply_lock:
                        self._reply, self._member_id = None, None
                    left = True
                continue
            left = False
            self._heartbeat()

    @property
    def member_id(self) -> str | None:
        return self._member_id

    def placement(self, message: Message) -> PartitionLocation | None:
        """The cluster and physical partition of a message this consumer handed out."""
        return placement_in(self._follower.image, message)

    def assignment(self) -> list[LogicalPartition]:
        """The logical partitions this member consumes now."""
        return sorted(self._owned)

    def _apply_assignment(self) -> None:
        """On the polling thread: drop revoked partitions, start the ones the coordinator released."""
        with self._reply_lock:
            reply, last_ok = self._reply, self._last_heartbeat_ok
        cut_off = time.monotonic() - last_ok > self._session_timeout_ms / 1000
        image = self._follower.image
        applied = self._applied
        if applied is not None and applied[0] is reply and applied[1] is image and applied[2] == cut_off:
            return  # called on every poll: nothing new since the last time
        self._applied = None  # until done: a call that raises is redone on the next poll
        if reply is None:  # not (or no longer) a member: own nothing
            self._revoke_all(list(self._owned))
            self._applied = (reply, image, cut_off)
            return
        if cut_off:
            wanted: set[LogicalPartition] = set()  # cut off from the coordinator: stop consuming everything
            startable: set[LogicalPartition] = set()
        else:
            wanted = {(t, p) for t, p in reply["assignment"]}
            startable = {(t, p) for t, p in reply["startable"]}
        revoked = []
        for tp in list(self._owned):
            p = _partition(image, tp)
            if tp not in wanted or p is None or p.state == "removed":
                revoked.append(tp)
        self._revoke_all(revoked)
        started: list[LogicalPartition] = []
        for tp in sorted(startable - set(self._owned)):
            p = _partition(image, tp)
            if p is None or p.cluster_id not in image.clusters:
                continue  # the followed image is behind the coordinator: start it on a later poll
            self._start(tp, PartitionLocation(p.cluster_id, p.physical_topic, p.physical_partition))
            started.append(tp)
        if started and self._on_assign is not None:
            self._on_assign(self, started)
        if started or len(self._owned) != len(wanted):
            self._beat_now.set()
        self._applied = (reply, image, cut_off)

    def _revoke_all(self, partitions: list[LogicalPartition]) -> None:
        if not partitions:
            return
        if self._on_revoke is not None:
            self._on_revoke(self, partitions)
        for tp in partitions:
            self._revoke(tp)
        # A cluster this member no longer reads from loses its client at once: its physical topic may be
        # deleted next (a shrink, a decommission), and librdkafka 2.16 crashes a live consumer that has
        # known a topic deleted on Tansu. _start makes a new client when partitions there come back.
        for cluster_id in set(self._consumers) - {p.cluster_id for p in self._owned.values()}:
            self._consumers.pop(cluster_id).close()
            self._slots.pop(cluster_id, None)

    def _start(self, tp: LogicalPartition, placement: PartitionLocation) -> None:
        consumer = self._consumer(placement.cluster_id)
        start = self._start_at(consumer, placement)
        consumer.incremental_assign([start])
        self._starts[tp] = start
        self._owned[tp] = placement
        self._unfetched[tp] = time.monotonic()
        origin = Origin(tp[0], tp[1], placement.cluster_id)
        set_slot(self._slots.setdefault(placement.cluster_id, {}), *placement[1:], origin)
        log.info(
            "group %s: %s consumes %s/%d from %s",
            self.group,
            self._member_id,
            *tp,
            "its commit" if start.offset == OFFSET_STORED else start.offset,
        )

    def _start_at(self, consumer: Consumer, placement: PartitionLocation) -> TopicPartition:
        """Where a partition starts: the group's committed offset (``OFFSET_STORED``, which librdkafka looks up,
        then resets by ``auto.offset.reset``). A broker whose ListOffsets(earliest) cannot be trusted
        (``metadata_client.brokers``: Tansu now and then answers its second batch, and the first would be skipped) is
        asked for the commit here, and without one the partition starts at the broker's log start. A broker
        that does not answer now (down) is left to librdkafka's lookup."""
        start = TopicPartition(placement.physical_topic, placement.physical_partition, OFFSET_STORED)
        if not self._reset_to_earliest:
            return start
        bootstrap = self._follower.image.clusters[placement.cluster_id].bootstrap_servers
        try:
            log_start = broker_at(bootstrap, COMMITTED_TIMEOUT_S).log_start
            if log_start is not None:
                [committed] = consumer.committed([TopicPartition(start.topic, start.partition)], COMMITTED_TIMEOUT_S)
                start.offset = committed.offset if committed.offset >= 0 else log_start
        except (KafkaException, BrokerUnknown) as e:
            log.warning(
                "group %s: %s[%d] starts from librdkafka's lookup of its commit: %s",
                self.group,
                start.topic,
                start.partition,
                e,
            )
        return start

    def _restart_stalled(self) -> None:
        """Assign again the partitions whose fetcher has not started for ``STALLED_START_S``. A partition's
        fetcher has started once librdkafka caches the high watermark of a fetch response for it."""
        now = self._stalls_checked = time.monotonic()
        for tp, since in list(self._unfetched.items()):
            p = self._owned[tp]
            consumer = self._consumers[p.cluster_id]
            physical = TopicPartition(p.physical_topic, p.physical_partition)
            if consumer.get_watermark_offsets(physical, cached=True)[1] >= 0:
                del self._unfetched[tp]
            elif now - since >= STALLED_START_S:  # at the offset it started at: nothing was read since
                log.info("group %s: %s/%d has not started fetching; assigning it again", self.group, *tp)
                consumer.incremental_unassign([physical])
                consumer.incremental_assign([self._starts[tp]])
                self._unfetched[tp] = now

    def _revoke(self, tp: LogicalPartition) -> None:
        placement = self._owned[tp]
        consumer = self._consumers[placement.cluster_id]
        physical = TopicPartition(placement.physical_topic, placement.physical_partition)
        if self._auto_commit:
            self._commit_handed_out(consumer, [placement], False)
        del self._owned[tp]
        self._starts.pop(tp, None)
        self._unfetched.pop(tp, None)
        self._key_order.drop(tp)  # its held records: the next owner reads them again (not committed past)
        self._paused.discard(tp)
        try:
            consumer.incremental_unassign([physical])
        except KafkaException as e:
            log.warning("group %s: unassigning %s/%d: %s", self.group, *tp, e)
        # from here on, a message of it still in flight is dropped by place_batch
        set_slot(self._slots[placement.cluster_id], placement.physical_topic, placement.physical_partition, None)
        self._beat_now.set()
        log.info("group %s: %s released %s/%d", self.group, self._member_id, *tp)

    def _consumer(self, cluster_id: str) -> Consumer:
        consumer = self._consumers.get(cluster_id)
        if consumer is None:
            cluster = self._follower.image.clusters[cluster_id]
            consumer = Consumer({**self._physical_config, "bootstrap.servers": cluster.bootstrap_servers})
            self._consumers[cluster_id] = consumer
        return consumer

    # -- consuming ---------------------------------------------------------------------------------
    def poll(self, timeout: float = -1) -> Message | None:
        """One message (or None after ``timeout`` seconds; -1 waits indefinitely)."""
        messages = self.consume(1, timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` messages from every physical cluster this member reads: confluent-kafka
        ``Message`` objects whose ``topic()`` and ``partition()`` are logical, ``offset()`` physical (see
        ``sdk.messages``).

        Never takes more from librdkafka than it hands out, so each physical consumer's position (the
        offset after the last message it returned) is exactly what the application was handed: commits
        use it, with no bookkeeping per message here."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._last_poll = time.monotonic()
        while True:
            self._apply_assignment()
            self._key_order_step()
            released = self._key_order.take(num_messages)
            if released:  # before anything new is read: a slot's new records never pass its released ones
                return released
            if self._unfetched and time.monotonic() - self._stalls_checked > STALLED_START_S / 4:
                self._restart_stalled()
            if self._auto_commit and time.monotonic() - self._last_auto_commit > self._auto_commit_s:
                self._last_auto_commit = time.monotonic()
                self.commit(asynchronous=True)
            consumers = list(self._consumers.items())  # each reads at least one owned partition
            if consumers:
                wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                n = len(consumers)
                self._next_consumer = first = (self._next_consumer + 1) % n
                out: list[Message] = []
                for i in range(n):
                    cluster_id, consumer = consumers[(first + i) % n]
                    # wait only on the last consumer of the round, when nothing was found before it
                    batch = consumer.consume(num_messages - len(out), wait if i == n - 1 and not out else 0)
                    if batch:
                        placed = self._key_order.offer(
                            self._follower.image, place_batch(batch, self._slots[cluster_id]), self
                        )
                        if out:
                            out += placed
                        else:
                            out = placed
                        if len(out) >= num_messages:
                            break
                if out:
                    return out
            elif deadline is None or time.monotonic() < deadline:
                time.sleep(0.02)
            if deadline is not None and time.monotonic() >= deadline:
                return []

    # -- strict key order (sdk/key_order.py) ---------------------------------------------------------
    def _key_order_step(self) -> None:
        """Let go the held messages the latest metadata and releases allow; and, now and then, read the
        group's committed offsets on the open parents this member owns, for the coordinator (its next
        heartbeat)."""
        image = self._follower.image
        with self._reply_lock:
            releases = self._reply.get("key_releases") if self._reply is not None else None
        self._key_order.observe(image, releases, self)
        paused = self._key_order.paused() & set(self._owned)
        if paused != self._paused:
            self._pause_fetching(paused)
        parents = self._key_order.parents_to_check(image, list(self._owned), time.monotonic())
        if parents:
            committed = []
            for tp in parents:
                p = self._owned[tp]
                try:
                    [c] = self._consumers[p.cluster_id].committed(
                        [TopicPartition(p.physical_topic, p.physical_partition)], timeout=CLIENT_DEADLINE_S
                    )
                except KafkaException as e:
                    log.warning("group %s: reading the committed offset of %s/%d: %s", self.group, *tp, e)
                    continue
                if c.offset >= 0 and c.error is None:
                    committed.append((tp[0], tp[1], c.offset))
            self._key_order.committed = committed

    def _pause_fetching(self, paused: set[LogicalPartition]) -> None:
        """Pause fetching ``paused`` (and resume what is no longer in it) on the physical consumers."""
        for tps, pause in ((paused - self._paused, True), (self._paused - paused, False)):
            for tp in tps:
                p = self._owned.get(tp)
                if p is None:
                    continue
                physical = [TopicPartition(p.physical_topic, p.physical_partition)]
                try:
                    if pause:
                        self._consumers[p.cluster_id].pause(physical)
                    else:
                        self._consumers[p.cluster_id].resume(physical)
                except KafkaException as e:
                    log.warning("group %s: pausing or resuming %s/%d: %s", self.group, *tp, e)
        if paused:
            log.info(
                "group %s: %d records held back: fetching paused on %s",
                self.group,
                sum(s["held"] for s in self._key_order.stats().values()),
                sorted(paused),
            )
        self._paused = paused

    def key_order_stats(self) -> dict[str, Any]:
        """Per strict topic: records held now and ever, delivered, the longest hold (ms) and order breaks."""
        return self._key_order.stats()

    def _origin(self, cluster_id: str, tp: TopicPartition) -> LogicalPartition | None:
        origin = origin_in(self._slots.get(cluster_id, {}), tp.topic, tp.partition)
        return (origin.topic, origin.partition) if origin is not None else None

    def _not_past_held(self, cluster_id: str, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """Physical commit offsets lowered to the first record held back there, if any."""
        out = []
        for tp in offsets:
            logical = self._origin(cluster_id, tp)
            if logical is not None:
                tp = TopicPartition(tp.topic, tp.partition, self._key_order.commit_position(logical, tp.offset))
            out.append(tp)
        return out

    # -- offsets ----------------------------------------------------------------------------------
    def commit(self, message: Message | None = None, offsets: Any = None, asynchronous: bool = True) -> None:
        """Commit to the physical clusters: ``message``'s offset + 1; or ``offsets``, TopicPartitions of
        *logical* topic and partition with the *physical* offset to commit (the next one to read, as
        ``message.offset() + 1``); or, for every owned partition, the offset after the last message handed
        to the application. Partitions this member does not own are skipped: committing for another
        member's partition could move it back."""
        if offsets is not None:
            by_cluster: dict[str, list[TopicPartition]] = {}
            for tp in offsets:
                if tp.offset < 0:
                    raise ValueError(f"commit offset of {tp.topic}/{tp.partition} must be >= 0, got {tp.offset}")
                placement = self._owned.get((tp.topic, tp.partition))
                if placement is not None:
                    physical = TopicPartition(placement.physical_topic, placement.physical_partition, tp.offset)
                    by_cluster.setdefault(placement.cluster_id, []).append(physical)
            for cluster_id, physical_offsets in by_cluster.items():
                _commit(self._consumers[cluster_id], self._not_past_held(cluster_id, physical_offsets), asynchronous)
            return
        if message is not None:
            placement = self._owned.get((message.topic(), message.partition()))  # type: ignore[arg-type]  # logical: set
            offset = message.offset()
            if placement is None or offset is None:
                return  # no longer ours: the next owner starts from the last committed offset
            tp = TopicPartition(placement.physical_topic, placement.physical_partition, offset + 1)
            _commit(
                self._consumers[placement.cluster_id], self._not_past_held(placement.cluster_id, [tp]), asynchronous
            )
            return
        for cluster_id, consumer in self._consumers.items():
            placements = [p for p in self._owned.values() if p.cluster_id == cluster_id]
            self._commit_handed_out(consumer, placements, asynchronous)

    def _commit_handed_out(self, consumer: Consumer, placements: list[PartitionLocation], asynchronous: bool) -> None:
        """Commit these partitions' positions: ``consume`` hands out everything librdkafka returned, so a
        position is the offset after the last message the application got (none yet: nothing to commit)."""
        if not placements:
            return
        try:
            positions = consumer.position([TopicPartition(p.physical_topic, p.physical_partition) for p in placements])
            offsets = handed_out(positions)
            if offsets:
                _commit(consumer, self._not_past_held(placements[0].cluster_id, offsets), asynchronous)
        except KafkaException as e:
            log.warning("group %s: commit failed: %s", self.group, e)

    # -- transactions: consume-transform-produce --------------------------------------------------------------
    def consumer_group_metadata(self) -> GroupMetadata:
        """What ``FederatedProducer.send_offsets_to_transaction`` takes: this group, and this consumer to map
        logical partitions to physical ones."""
        return GroupMetadata(str(self.group), self)

    def physical_offsets(self, offsets: Sequence[TopicPartition]) -> dict[str, tuple[list[TopicPartition], Any]]:
        """Per cluster: ``offsets`` (logical partitions) as physical ones, and its consumer's group metadata.
        Partitions this member does not own are skipped, as by ``commit``."""
        by_cluster: dict[str, tuple[list[TopicPartition], Any]] = {}
        for tp in offsets:
            if tp.offset < 0:
                raise ValueError(f"offset of {tp.topic}/{tp.partition} must be >= 0, got {tp.offset}")
            placement = self._owned.get((tp.topic, tp.partition))
            if placement is None:
                continue
            cluster_id = placement.cluster_id
            if cluster_id not in by_cluster:
                by_cluster[cluster_id] = ([], self._consumers[cluster_id].consumer_group_metadata())
            physical = TopicPartition(placement.physical_topic, placement.physical_partition, tp.offset)
            by_cluster[cluster_id][0].append(physical)
        return by_cluster

    def close(self) -> None:
        """Commit (with auto commit), leave the group so others take over at once, and stop."""
        if self._closed.is_set():
            return
        self._revoke_all(list(self._owned))
        self._closed.set()
        self._beat_now.set()
        if self._heartbeat_thread is not None:
            # A beat in flight must end before the leave (it would rejoin) and before the client closes.
            self._heartbeat_thread.join(CLIENT_DEADLINE_S + 1)
        if self._member_id is not None:
            try:
                self._client.post(f"/v1/groups/{self.group}/leave", {"member_id": self._member_id})
            except KfedError as e:
                log.warning("group %s: leave failed (%s); the session will expire", self.group, e)
        for consumer in self._consumers.values():
            consumer.close()
        self._follower.stop()
        self._client.close()

    def __enter__(self) -> FederatedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _partition(image: MetadataImage, tp: LogicalPartition) -> PartitionImage | None:
    """The image's logical partition ``tp``, or None when the image does not have it (yet, or any more)."""
    topic = image.topics.get(tp[0])
    return topic.partitions[tp[1]] if topic is not None and tp[1] < len(topic.partitions) else None


def handed_out(positions: list[TopicPartition]) -> list[TopicPartition]:
    """The positions worth committing: those of partitions that returned at least one message since they
    were assigned (librdkafka reports the others as a negative logical offset)."""
    return [tp for tp in positions if tp.offset >= 0 and tp.error is None]


def _commit(consumer: Consumer, offsets: list[TopicPartition], asynchronous: bool) -> None:
    """``commit`` with a literal ``asynchronous``: confluent-kafka types each value as its own overload."""
    if asynchronous:
        consumer.commit(offsets=offsets, asynchronous=True)
    else:
        consumer.commit(offsets=offsets, asynchronous=False)
