"""``FederatedProducer``: produce to logical topics; the data goes straight to the physical clusters.

Configured like confluent-kafka's ``Producer``, with ``kfed.controllers`` (controller URLs) instead of
``bootstrap.servers``; every other key is passed to the underlying producers (one per physical cluster,
created on first use). Routing comes from a followed metadata image (the log, tailed by offset):

- a partition takes writes when it is *effectively writable* (partition writable, cluster active and not
  fenced), its leader is known (its physical topic exists), and this producer has not muted its cluster;
- key-less messages go round-robin over those partitions (per topic);
- keyed messages go to ``crc32(key) % len(writable partitions)``. Ordering caveat: when the writable set
  changes (a partition goes read-only, a cluster is fenced or added), keys move to other partitions, so
  per-key order holds only while the set is stable — as with any partition-count change in Kafka;
- on a ``key_order: strict`` topic (docs/KEY_ORDER.md), keyed messages go where the topic's current routing
  epoch maps their slot (``crc32(key) & 16383``) and, once their slot has moved, carry that epoch in a
  ``kfed-epoch`` header; a key whose partition takes no writes right now waits (below) instead of moving:
  keys move only with an epoch. Such messages also wait while no controller has confirmed this producer's
  routing for ``kfed.key.order.lease.ms`` (default 1.5 s, below the 2 s after which the seal that a stale
  route would write behind is measured).
  Key-less messages and explicit partitions are routed as on any topic, unstamped (they are never held);
- an explicit ``partition`` that is not writable fails at once with ``PartitionNotWritable``.

Waiting, as librdkafka does for a topic whose leader is unknown: a message that no partition can take
*right now* (no leader known yet, every cluster fenced or muted, the topic shrunk to nothing writable, the
metadata not loaded yet because no controller answers) is queued here, not refused. It leaves the queue
when a partition takes it (on ``poll``/``flush``, or on a ``produce`` after the metadata changed), or is
reported to ``on_delivery`` with ``_MSG_TIMED_OUT`` once ``message.timeout.ms`` (default 300 s) passed.
``queue.buffering.max.messages`` bounds the queue (``BufferError`` past it, like confluent-kafka's). While
a topic has waiting messages, its new messages queue behind them: order per partition and per key holds.
An explicit partition that is writable but has no leader yet waits too; one that is read-only, removed or
on a fenced or muted cluster is refused at once. A topic the loaded metadata does not have is refused at
once (``UnknownTopic``): the followed log is the federation's truth, there is no propagation to wait out.
Once handed to a cluster's producer, a message is bounded by that producer's own ``message.timeout.ms``.

Client-side muting (the KIP-693 idea): a cluster-level delivery error, or the log fencing a cluster,
mutes that cluster's partitions in this producer for ``kfed.mute.ms`` (default 10 s) and purges the
messages still queued for it; key-less ones are produced again elsewhere, keyed ones and those in flight
are reported to ``on_delivery`` with their error. Nothing is dropped silently. A request that got no answer
(its broker died) puts its messages back in librdkafka's queue, and the broker may have written them: a
key-less one is then produced elsewhere all the same (at least once; librdkafka does not tell which).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import cycle
from typing import Any, Final

from confluent_kafka import KafkaError, Message, Producer

from metadata_client.follower import FollowerError, LogFollower
from metadata_log.image import MetadataImage, PartitionLocation, is_writable
from metadata_log.image.key_orders import strict_history
from metadata_log.keymap import SLOT_MASK
from metadata_log.publisher import LogDelta

from .config import check_kafka_settings, ms_setting, split_config
from .errors import PartitionNotWritable, UnknownTopic
from .lease import RoutingLease
from .messages import Origin, Report, label, placement_in, reporter, unsent
from .routes import (
    NOT_LOADED,
    Keyless,
    Route,
    Target,
    after_failure,
    keyless_router,
    strict_table,
    why_not_writable,
    with_epoch_header,
)
from .transactions import TransactionalApi, Transactions

log = logging.getLogger(__name__)

DEFAULT_MUTE_MS: Final = 10_000
DEFAULT_MESSAGE_TIMEOUT_MS: Final = 300_000  # librdkafka's defaults
DEFAULT_QUEUE_MAX_MESSAGES: Final = 100_000
DEFAULT_KEY_ORDER_LEASE_MS: Final = 1_500
"""``kfed.key.order.lease.ms``: keyed messages of a strict topic wait while the routing this producer holds was
last confirmed by a controller longer ago than this. Below the controllers' 2 s grace before a seal is
measured (docs/KEY_ORDER.md, decision 3); 0 turns the lease off."""
DeliveryCallback = Callable[[KafkaError | None, Message], None]  # the message labelled logically


@dataclass(slots=True)
class _Waiting:
    """A message no partition could take when it was produced (see the module's docstring)."""

    value: Any
    key: Any
    partition: int | None
    headers: Any
    callback: DeliveryCallback | None
    timestamp: int
    deadline: float  # monotonic; inf: message.timeout.ms 0, no limit


class FederatedProducer(TransactionalApi):  # the transactional methods: sdk/transactions.py
    def __init__(self, config: Mapping[str, Any]) -> None:
        client_config = split_config(config)
        cfg = client_config.kafka
        self._txn = Transactions.from_config(self, client_config)
        self._mute_s = ms_setting(cfg, "kfed.mute.ms", DEFAULT_MUTE_MS) / 1000
        lease_ms = ms_setting(cfg, "kfed.key.order.lease.ms", DEFAULT_KEY_ORDER_LEASE_MS)
        self._default_callback: DeliveryCallback | None = cfg.pop("on_delivery", None)
        self._physical_config = {"enable.metrics.push": False, **cfg}
        check_kafka_settings(Producer, self._physical_config)  # invalid settings fail here, not at produce()
        timeout_key = "delivery.timeout.ms" if "delivery.timeout.ms" in cfg else "message.timeout.ms"
        timeout_ms = ms_setting(cfg, timeout_key, DEFAULT_MESSAGE_TIMEOUT_MS, keep=True)
        self._timeout_s = timeout_ms / 1000 if timeout_ms else float("inf")
        self._max_waiting = ms_setting(cfg, "queue.buffering.max.messages", DEFAULT_QUEUE_MAX_MESSAGES, keep=True)
        self._waiting: dict[str, deque[_Waiting]] = {}  # topic -> its messages no partition could take yet
        self._waiting_count = 0
        self._waiting_tried = -1  # the routes' epoch the waiting messages were last tried with
        self._undeliverable: deque[tuple[DeliveryCallback | None, KafkaError, Message]] = deque()  # for poll()
        self._producers: dict[str, Producer] = {}
        self._closed = False
        self._routes: dict[str, Route] = {}
        self._keyless: dict[str, Iterator[Keyless]] = {}  # topic -> its route's keyless, while it has writable ones
        self._epoch = 0  # routes made before the last change of metadata or mutes are not kept
        self._muted: dict[str, float] = {}  # cluster id -> muted until (monotonic)
        self._fenced: set[str] = set()
        self._reroute: deque[tuple[str, Any, Any, Any, DeliveryCallback | None]] = deque()
        self._to_purge: set[str] = set()
        self._lock = threading.Lock()  # guards _to_purge, _fenced, the routes' epoch (the follower thread writes)
        self._follower = LogFollower(
            client_config.controllers,
            wait_ms=2000,
            publisher=self,
            access=client_config.access,
            topics=client_config.topics,
        )
        self._lease = RoutingLease(self._follower, lease_ms / 1000 if lease_ms else float("inf"), self._forget_routes)
        try:
            self._follower.poll(0)  # an image before the first produce
        except FollowerError as e:  # like bootstrap.servers: retried in the background, messages wait
            log.warning("no metadata yet (%s); following the log in the background", e)
        self._follower.start()
        self.produce = keyless_router(self._keyless, self.produce)  # type: ignore[method-assign]  # same call
        if self._txn is not None:
            self.produce = self._txn.guard(self.produce)  # type: ignore[method-assign]  # same call

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def metadata_offset(self) -> int:
        """Offset of the metadata this producer routes with."""
        return self._follower.image.offset

    def placement(self, message: Message) -> PartitionLocation | None:
        """The cluster and physical partition of a message in a delivery report of this producer."""
        return placement_in(self._follower.image, message)

    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        """The followed log advanced (a ``MetadataPublisher``, called on the follower's thread): drop cached
        routes; purge queues of clusters that became fenced or were decommissioned. A cluster going read-only
        or draining (a planned decommission) keeps its queue: its brokers still take what was routed there
        before, as a shrunk partition's do, and purging would fail keyed messages for nothing."""
        changed = delta.changes.clusters_changed  # any other cluster is fenced or not as ``_fenced`` says
        clusters = image.clusters
        fenced = {c for c in changed if c in clusters and (clusters[c].fenced or clusters[c].state == "decommissioned")}
        with self._lock:
            self._to_purge |= fenced - self._fenced
            self._fenced = (self._fenced - changed) | fenced
        self._forget_routes()

    def _forget_routes(self) -> None:
        with self._lock:  # against a route being stored meanwhile (see _route)
            self._epoch += 1
            self._routes = {}
            self._keyless.clear()  # in place: the C router holds it

    def _route(self, topic: str) -> Route:
        route = self._routes.get(topic)
        if route is not None:
            return route
        epoch, image = self._epoch, self._follower.image
        if image.offset < 0:
            return NOT_LOADED  # not stored: the first image forgets routes anyway
        if not self._follower.follows(topic):
            try:  # the first message to this topic: its metadata, once (the client holds what it uses)
                self._follower.follow((topic,))
            except FollowerError as e:
                log.warning("no metadata of %s yet (%s); its messages wait", topic, e)
                return NOT_LOADED
            epoch, image = self._epoch, self._follower.image
        t = image.topics.get(topic)
        if t is None:
            raise UnknownTopic(topic, image.offset)
        now = time.monotonic()
        writable: list[Target] = []
        keyless: list[Keyless] = []
        targets, why_not, leaderless = {}, {}, set()
        for p in t.partitions:
            target = Target(Origin(topic, p.partition, p.cluster_id), p.physical_topic, p.physical_partition)
            targets[p.partition] = target
            cluster = image.clusters.get(p.cluster_id)
            leader = cluster.leaders.get((p.physical_topic, p.physical_partition)) if cluster else None
            if not is_writable(image, p):
                why_not[p.partition] = why_not_writable(p.state, cluster)
            elif leader is None:
                why_not[p.partition] = (
                    f"physical partition {p.physical_topic}/{p.physical_partition} on {p.cluster_id} has no leader yet"
                )
                leaderless.add(p.partition)
            elif self._muted.get(p.cluster_id, 0) > now:
                why_not[p.partition] = f"cluster {p.cluster_id} is muted by this producer after delivery errors"
            else:
                producer = self._producers.get(p.cluster_id) or self._producer(p.cluster_id)
                target.send = producer.produce
                target.report_pinned = self._reporter(target, rerouted=False)
                report = self._reporter(target, rerouted=True)
                keyless.append((producer.produce, p.physical_topic, p.physical_partition, report, target))
                writable.append(target)
        table, stamp, stamps = self._strict_table(image, topic, writable)
        route = Route(
            tuple(writable), cycle(keyless), targets, why_not, frozenset(leaderless), True, table, stamp, stamps
        )
        with self._lock:  # the check and the stores at once: the follower thread may forget routes between them
            if epoch == self._epoch:  # else made from what just changed: good for this message only
                self._routes[topic] = route
                if writable and topic not in self._waiting:  # the C router must not overtake waiting messages
                    self._keyless[topic] = route.keyless
        return route

    def _strict_table(
        self, image: MetadataImage, topic: str, writable: list[Target]
    ) -> tuple[list[Target | None] | None, tuple[str, bytes] | None, list[list[tuple[str, bytes]] | None] | None]:
        """``routes.strict_table`` of ``topic``, the lease started (a lapsed lease: every slot waits)."""
        history = strict_history(image.key_orders, topic)
        if history is None:
            return None, None, None
        self._lease.start()
        return strict_table(history, writable if self._lease.held else [])

    # -- producing ---------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
    ) -> None:
        """Queue one message for a logical topic (same contract as confluent-kafka's ``produce``).

        The usual call, key-less with no extras, is served in C by ``keyless_router`` (same routing).
        A message no partition can take right now waits (see the module's docstring)."""
        if self._to_purge:
            self._purge_fenced()
        if self._waiting and self._waiting_tried != self._epoch:
            self._try_waiting(expire=False)
        route = self._routes.get(topic) or self._route(topic)
        # Arguments go positionally (confluent-kafka parses keywords more slowly); the 6th is on_delivery's alias.
        if partition is None or partition < 0:
            writable = route.writable
            if not writable or (self._waiting and topic in self._waiting):
                self._wait(topic, _Waiting(value, key, None, headers, on_delivery, timestamp, 0.0))
                return
            if key is None:
                send, physical_topic, physical_partition, report, target = next(route.keyless)
                if on_delivery is not None:
                    report = partial(self._delivered, target, on_delivery, True)
                if timestamp or headers is not None:
                    send(physical_topic, value, None, physical_partition, report, None, timestamp, headers)
                else:  # two to five arguments fewer to parse: the usual case
                    send(physical_topic, value, None, physical_partition, report)
                return
            crc = zlib.crc32(key if isinstance(key, bytes) else str(key).encode())
            table = route.table
            if table is None:
                target = writable[crc % len(writable)]
            else:  # strict: the epoch's owner of the key's slot, or wait for it
                slot = crc & SLOT_MASK
                target = table[slot]  # type: ignore[assignment]  # checked just below
                if target is None:
                    self._wait(topic, _Waiting(value, key, None, headers, on_delivery, timestamp, 0.0))
                    return
                stamped = route.stamps[slot]  # type: ignore[index]  # set with table
                if stamped is not None:
                    headers = stamped if headers is None else with_epoch_header(headers, route.stamp)  # type: ignore[arg-type]  # set with table
        else:
            target = route.targets.get(partition)  # type: ignore[assignment]  # checked just below
            if (target is None or partition in route.why_not) and not route.waits(partition):
                why = route.why_not.get(partition, f"topic {topic!r} has no partition {partition}")
                raise PartitionNotWritable(topic, partition, why)
            if target is None or partition in route.why_not or (self._waiting and topic in self._waiting):
                self._wait(topic, _Waiting(value, key, partition, headers, on_delivery, timestamp, 0.0))
                return
        pinned = target.report_pinned if on_delivery is None else partial(self._delivered, target, on_delivery, False)
        target.send(target.physical_topic, value, key, target.physical_partition, pinned, None, timestamp, headers)  # type: ignore[misc]  # writable: send is set

    # -- messages waiting for a partition ----------------------------------------------------------
    def _wait(self, topic: str, message: _Waiting) -> None:
        if self._waiting_count >= self._max_waiting:
            raise BufferError(f"Local: Queue full ({self._waiting_count} messages wait for a writable partition)")
        message.deadline = time.monotonic() + self._timeout_s
        queue = self._waiting.get(topic)
        if queue is None:
            with self._lock:  # with _route's store: no key-less route of this topic in the C router from now on
                queue = self._waiting[topic] = deque()
                self._keyless.pop(topic, None)
        queue.append(message)
        self._waiting_count += 1

    def _try_waiting(self, expire: bool) -> None:
        """Hand the waiting messages a partition now takes to it, in order; with ``expire``, report those
        past their ``message.timeout.ms``. The others keep their place."""
        self._waiting_tried = self._epoch
        now = time.monotonic()
        leased = self._lease.held
        for topic, queue in list(self._waiting.items()):
            try:
                route = self._routes.get(topic) or self._route(topic)
            except UnknownTopic as e:  # deleted while its messages waited
                self._fail_waiting(topic, queue, KafkaError(KafkaError._UNKNOWN_TOPIC, str(e)))
                continue
            still: deque[_Waiting] = deque()
            for m in queue:
                p = m.partition
                if route.takes(p, m.key):
                    self._send(route, topic, m.value, m.key, p, m.headers, m.callback, m.timestamp)
                elif p is not None and route.loaded and not route.waits(p):
                    why = route.why_not.get(p, f"topic {topic!r} has no partition {p}")
                    error = KafkaError(KafkaError._UNKNOWN_PARTITION, str(PartitionNotWritable(topic, p, why)))
                    self._undeliverable.append((m.callback, error, unsent(topic, m.value, m.headers)))
                elif expire and m.deadline <= now:
                    why = "; ".join(f"P{q}: {w}" for q, w in sorted(route.why_not.items())[:4]) or (
                        "no metadata yet"
                        if leased
                        else "its key routing not confirmed by a controller within "
                        f"kfed.key.order.lease.ms ({self._lease.lease_s * 1000:.0f} ms)"
                    )
                    error = KafkaError(
                        KafkaError._MSG_TIMED_OUT,
                        f"Local: Message timed out waiting for a writable partition of {topic!r} ({why})",
                    )
                    self._undeliverable.append((m.callback, error, unsent(topic, m.value, m.headers)))
                else:
                    still.append(m)
            self._waiting_count -= len(queue) - len(still)
            with self._lock:
                if still:
                    self._waiting[topic] = still
                else:  # the next produce() routes it (and lets the C router have it) again
                    del self._waiting[topic]
                    self._routes.pop(topic, None)

    def _fail_waiting(self, topic: str, queue: deque[_Waiting], error: KafkaError) -> None:
        for m in queue:
            self._undeliverable.append((m.callback, error, unsent(topic, m.value, m.headers)))
        self._waiting_count -= len(queue)
        with self._lock:
            del self._waiting[topic]

    def _send(
        self,
        route: Route,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Any,
        on_delivery: DeliveryCallback | None,
        timestamp: int,
    ) -> None:
        """Hand one message to the physical producer of the partition ``route`` gives it (one is writable)."""
        if partition is None and key is None:
            send, physical_topic, physical_partition, report, target = next(route.keyless)
            if on_delivery is not None:
                report = partial(self._delivered, target, on_delivery, True)
            send(physical_topic, value, None, physical_partition, report, None, timestamp, headers)
            return
        if partition is None:
            target = route.keyed(key)  # type: ignore[assignment]  # takes() said it can go
            if route.stamps is not None and route.stamp is not None:
                key_bytes = key if isinstance(key, bytes) else str(key).encode()
                if route.stamps[zlib.crc32(key_bytes) & SLOT_MASK] is not None:
                    headers = with_epoch_header(headers, route.stamp)
        else:
            target = route.targets[partition]
        pinned = target.report_pinned if on_delivery is None else partial(self._delivered, target, on_delivery, False)
        target.send(target.physical_topic, value, key, target.physical_partition, pinned, None, timestamp, headers)  # type: ignore[misc]  # writable: send is set

    def _serve_undeliverable(self) -> int:
        served = 0
        while self._undeliverable:
            callback, error, message = self._undeliverable.popleft()
            callback = callback or self._default_callback
            if callback is not None:
                callback(error, message)
            served += 1
        return served

    def _forget_expired_mutes(self) -> None:
        """Routes made while a cluster was muted exclude it; once its mute ends they are made again."""
        now = time.monotonic()
        expired = [c for c, until in self._muted.items() if until <= now]
        if expired:
            for cluster_id in expired:
                del self._muted[cluster_id]
            self._forget_routes()

    def _producer(self, cluster_id: str) -> Producer:
        if self._closed:
            raise RuntimeError("Producer has been closed")  # confluent-kafka's words for a closed producer
        cluster = self._follower.image.clusters[cluster_id]
        config = {
            **self._physical_config,
            "bootstrap.servers": cluster.bootstrap_servers,
            "error_cb": partial(self._cluster_error, cluster_id),
        }
        if self._txn is not None:
            config.update(self._txn.physical_config(cluster_id))
        producer = Producer(config)
        if self._txn is not None:
            self._txn.started(producer)
        self._producers[cluster_id] = producer
        return producer

    def _reporter(self, target: Target, rerouted: bool) -> Report:
        """The delivery callback of messages produced to ``target`` without their own: one per target, made
        once per route, so that produce() passes it without making anything."""
        return reporter(self._default_callback, target.origin, partial(self._delivered, target, None, rerouted))

    def _delivered(
        self, target: Target, callback: DeliveryCallback | None, rerouted: bool, err: KafkaError | None, msg: Message
    ) -> None:
        """A delivery report. ``callback``: the message's own, else the default; ``rerouted``: a key-less
        message this producer routed, safe to produce again elsewhere if it was never sent."""
        if err is None:
            callback = callback or self._default_callback
            if callback is not None:
                callback(None, label(msg, target.origin))
            return
        if self._txn is not None:
            self._txn.delivery_failed(err)
        then = after_failure(err.code(), rerouted, self._txn is not None)
        if then.reroute:
            self._reroute.append((target.origin.topic, msg.value(), msg.headers(), msg.timestamp()[1], callback))
            return
        if then.mute:
            self._mute(target.origin.cluster_id, err.str())
        callback = callback or self._default_callback
        if callback is not None:
            callback(err, label(msg, target.origin))

    def _cluster_error(self, cluster_id: str, err: KafkaError) -> None:
        # Every broker down is the cluster down. One connection's _TRANSPORT error is not: in a cluster of
        # several brokers the others take over its partitions' leadership (with one broker, _ALL_BROKERS_DOWN
        # follows at once).
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._mute(cluster_id, err.str())

    def _mute(self, cluster_id: str, why: str) -> None:
        if self._muted.get(cluster_id, 0) <= time.monotonic():
            log.warning("muting cluster %s for %.0f s: %s", cluster_id, self._mute_s, why)
            with self._lock:
                self._to_purge.add(cluster_id)
        self._muted[cluster_id] = time.monotonic() + self._mute_s
        self._forget_routes()

    def _purge_fenced(self) -> None:
        """Take back what is queued for clusters that stopped taking writes (fenced, or muted here).

        Repeated on every poll/flush while they stay so: requests that fail against a dead broker put
        their messages back in the queue, after an earlier purge."""
        now = time.monotonic()
        with self._lock:
            clusters = self._to_purge | self._fenced | {c for c, until in self._muted.items() if until > now}
            self._to_purge = set()
        for cluster_id in clusters:
            producer = self._producers.get(cluster_id)
            if producer is not None and len(producer):
                producer.purge(in_queue=True, in_flight=False, blocking=False)
                producer.poll(0)  # serve the purge reports now: key-less ones are re-routed

    def _drain_reroutes(self) -> int:
        moved = 0
        while self._reroute:
            topic, value, headers, timestamp, callback = self._reroute.popleft()
            try:
                self.produce(topic, value, None, None, headers, callback, timestamp)
                moved += 1
            except UnknownTopic as e:  # deleted meanwhile; no writable partition: it waits, as produce() does
                callback = callback or self._default_callback
                if callback is not None:
                    callback(
                        KafkaError(KafkaError._UNKNOWN_TOPIC, f"nowhere to re-route to: {e}"),
                        unsent(topic, value, headers),
                    )
        return moved

    def _housekeeping(self) -> int:
        """What poll() and flush() do besides serving the physical producers: returns reports served."""
        self._purge_fenced()
        if self._muted:
            self._forget_expired_mutes()
        served = self._drain_reroutes()
        if self._waiting:
            self._try_waiting(expire=True)
        return served + self._serve_undeliverable()

    # -- confluent-kafka's surface -----------------------------------------------------------------
    def poll(self, timeout: float = 0) -> int:
        """Serve delivery callbacks of every physical producer; returns how many were served."""
        served = self._housekeeping()
        producers = list(self._producers.values())
        if not producers:
            if timeout > 0 and not served:
                self._follower.wait_for(self._follower.image.offset + 1, min(timeout, 0.05))
            return served + self._housekeeping()
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            for p in producers:
                served += p.poll(0)
            served += self._drain_reroutes()
            if served or time.monotonic() >= deadline:
                return served
            time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every message is delivered or failed (or ``timeout``); returns how many remain."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._housekeeping()
            producers = list(self._producers.values())
            for p in producers:
                p.flush(0.05)
            if not producers and self._waiting:  # nothing to serve but the log: wait for it to move
                self._follower.wait_for(self._follower.image.offset + 1, 0.05)
            remaining = len(self)
            if remaining == 0 or (deadline is not None and time.monotonic() >= deadline):
                return remaining

    def __len__(self) -> int:
        return (
            sum(len(p) for p in self._producers.values())
            + len(self._reroute)
            + self._waiting_count
            + len(self._undeliverable)
        )

    def close(self, timeout: float | None = 30.0) -> int:
        """Flush for up to ``timeout``, then stop: what is still undelivered is dropped (librdkafka's purge;
        the count is returned) and the physical producers are closed, so that none of their threads keeps
        reconnecting to a cluster after the application is done with it. A transactional producer's are left
        open: closing one aborts its open transaction, whose fate the quorum's decision holds (a commit
        decided before the application gave up is completed by the leader's driver)."""
        remaining = self.flush(timeout)
        self._lease.stop()
        self._follower.stop()
        if self._txn is not None:
            self._txn.close()
        self._closed = True
        if self._txn is None:  # confluent-kafka's close() aborts an open transaction: the quorum decides those
            for producer in self._producers.values():
                producer.purge()
                producer.close()
            self._producers.clear()
        return remaining

    def __enter__(self) -> FederatedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
