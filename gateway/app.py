"""One gateway process: it follows the metadata log, registers and heartbeats, and serves Kafka clients.

It keeps no state another instance could not rebuild: the federation's shape comes from the followed log,
groups live in the quorum, committed offsets in the sub-clusters; what it holds in memory (connections,
partition leaders learnt from brokers, physical producer ids) is rebuilt on demand.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_wire.upstream import Upstream
from metadata_client.access import NO_ACCESS, Access
from metadata_client.client import AsyncControllerClient
from metadata_client.follower import LogFollower
from metadata_log.errors import Conflict, Forbidden, InvalidSetting, KfedError, Unauthorized

from . import admin, fetch, groups, produce
from .context import AdminContext, FetchContext, GroupContext, ProduceContext, bind
from .followed import FORGET_AFTER_S, FollowedTopics
from .members import Members
from .producers import ProducerIds
from .server import Handler, KafkaServer, Limits, served_versions
from .view import Broker, ClusterView, TopicView

log = logging.getLogger(__name__)

HEARTBEAT_S: Final = 1.0
REGISTER_RETRY_S: Final = 1.0
KEY_ORDER_LEASE_S: Final = 1.5
"""Keyed records of a strict topic are refused (retriably) while no controller confirmed this gateway's image
for this long: the SDK's ``kfed.key.order.lease.ms`` default, below the 2 s grace before a seal is measured
(docs/KEY_ORDER.md, decision 3)."""
FOLLOW_WAIT_MS: Final = 500
"""The follower's long poll: a third of the lease, so that an idle log still confirms the image in time."""
QUORUM_DEADLINE_S: Final = 5.0
"""All the attempts of one call to the controllers (registration, heartbeats, topic admin); a group call says
its own, shorter one. Shorter than a command's: a Kafka client is waiting on the answer."""
QUORUM_TIMEOUT_S: Final = 5.0
QUORUM_CONNECT_TIMEOUT_S: Final = 1.0


class RegistrationRefused(InvalidSetting):
    """The controllers refuse this gateway's token (none, or one without the admin's rights): retrying
    cannot help, the gateway stops with the flag to fix."""


@dataclass(frozen=True)
class GatewayConfig:
    controllers: list[str]
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertise_host: str | None = None  # None: the listen host
    advertise_port: int | None = None  # None: the port listened on
    gateway_id: int | None = None  # None: assigned by the quorum (the one this address had, if any)
    rack: str | None = None
    region: str | None = None  # where CreateTopics puts topics; None: the federation's only region
    access: Access = NO_ACCESS  # the token this gateway calls the controllers with
    sasl: bool = False  # SASL/PLAIN on the listener, kfed tokens as passwords
    client_tokens: tuple[str, ...] = ()  # passwords of clients that may produce and consume (not admin)
    tls: tuple[str, str] | None = None  # (certificate, key) PEM files: TLS on the listener
    limits: Limits = field(default_factory=Limits)
    cluster_name: str = "kfed"  # the cluster id clients see
    forget_topics_after_s: float = FORGET_AFTER_S  # a topic no request named for this long is not followed

    @property
    def listener(self) -> str:
        """Kafka's name for this listener's security: the gateways a client is told of all share it."""
        return ("SASL_" if self.sasl else "") + ("SSL" if self.tls else "PLAINTEXT")

    @property
    def admin_token(self) -> str | None:
        return self.access.token


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.limits = config.limits
        self.instance = uuid.uuid4().hex
        self.producers = ProducerIds()
        self.upstream = Upstream(client_id="kfed-gateway")
        self.quorum = AsyncControllerClient(
            config.controllers,
            deadline_s=QUORUM_DEADLINE_S,
            timeout_s=QUORUM_TIMEOUT_S,
            connect_timeout_s=QUORUM_CONNECT_TIMEOUT_S,
            access=config.access,
        )
        # no topic at first: those clients name are followed (followed.py)
        self.follower = LogFollower(config.controllers, wait_ms=FOLLOW_WAIT_MS, access=config.access, topics=())
        self.followed = FollowedTopics(self.follower, self.quorum, config.forget_topics_after_s)
        self.members = Members()
        self.gateway_id: int | None = config.gateway_id
        self.port = config.listen_port
        self.server = KafkaServer(self._handlers(), config.limits, _tls(config.tls), config.sasl)
        self._view: ClusterView | None = None
        self._topic_metadata: dict[tuple[str, bool], dict[str, Any]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        self._closing = threading.Event()  # stops the first poll of the log, which runs in a thread

    # -- the federation as clients see it ----------------------------------------------------------------
    @property
    def self_broker(self) -> Broker:
        host = self.config.advertise_host or self.config.listen_host
        port = self.config.advertise_port or self.port
        return Broker(self.gateway_id if self.gateway_id is not None else 0, host, port, self.config.rack)

    def view(self) -> ClusterView:
        """The cluster view of the followed image (rebuilt when the image or this gateway's id changes)."""
        image = self.follower.image
        view = self._view
        if view is None or view.image is not image or view.self_broker != self.self_broker:
            view = self._view = ClusterView(image, self.self_broker, self.config.listener)
            self._topic_metadata = {}
        return view

    def topic_metadata(self, view: ClusterView, topic: TopicView, producer: bool) -> dict[str, Any]:
        key = (topic.name, producer)
        entry = self._topic_metadata.get(key) if view is self._view else None
        if entry is None:
            entry = self._topic_metadata[key] = admin.topic_metadata(view, topic, producer)
        return entry

    def key_order_lease_held(self) -> bool:
        """Whether a controller confirmed the followed image within ``KEY_ORDER_LEASE_S``."""
        return time.monotonic() - self.follower.confirmed_at < KEY_ORDER_LEASE_S

    def _handlers(self) -> dict[int, tuple[Handler, bool]]:
        """What serves each API key, and whether it is ordered (see ``KafkaServer``): each handler bound to
        what its job may use (``context.py``), never to this gateway."""
        config = self.config
        tables = (admin.HANDLERS, produce.HANDLERS, fetch.HANDLERS, groups.HANDLERS)
        admin_context = AdminContext(
            view=self.view,
            resolve=self.followed.resolve,
            every_topic=self.followed.every_topic,
            topic_metadata=self.topic_metadata,
            served_versions=served_versions({key for table in tables for key in table}, config.sasl),  # ApiVersions
            producers=self.producers,
            quorum=self.quorum,
            cluster_name=config.cluster_name,
            region=config.region,
            admin_token=config.admin_token,
            client_tokens=config.client_tokens,
        )
        produce_context = ProduceContext(
            view=self.view,
            resolve=self.followed.resolve,
            upstream=self.upstream,
            producers=self.producers,
            limits=self.limits,
            key_order_lease_held=self.key_order_lease_held,
        )
        view, resolve, upstream, members = self.view, self.followed.resolve, self.upstream, self.members
        fetch_context = FetchContext(view, resolve, upstream=upstream, limits=self.limits, members=members)
        group_context = GroupContext(view, resolve, upstream=upstream, members=members, quorum=self.quorum)
        return {
            **bind(admin_context, admin.HANDLERS),
            **bind(produce_context, produce.HANDLERS),
            **bind(fetch_context, fetch.HANDLERS),
            **bind(group_context, groups.HANDLERS),
        }

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> int:
        """Follow the log, bind, register with the quorum, then accept clients; returns the port."""
        await asyncio.to_thread(self._first_image)
        self.follower.start()
        self.port = await self.server.bind(self.config.listen_host, self.config.listen_port)
        while not await self._register():
            await asyncio.sleep(REGISTER_RETRY_S)
        await self.server.serve()
        self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name="gateway heartbeat")
        log.info(
            "kfed gateway %s serving Kafka clients on %s:%d (advertised %s:%d)",
            self.gateway_id,
            self.config.listen_host,
            self.port,
            self.self_broker.host,
            self.self_broker.port,
        )
        return self.port

    def _first_image(self) -> None:
        while not self._closing.is_set():
            try:
                self.follower.poll(0)
                return
            except Exception as e:  # keep trying: the quorum may start after the gateway
                log.warning("no metadata from the controllers yet (%s); retrying", e)
                self._closing.wait(REGISTER_RETRY_S)

    async def _register(self) -> bool:
        broker = self.self_broker
        body = {
            "gateway_id": self.gateway_id,
            "host": broker.host,
            "port": broker.port,
            "instance": self.instance,
            "rack": self.config.rack,
            "listener": self.config.listener,
            "connections": self.server.connections,
            "requests": self.server.requests,
        }
        try:
            reply = await self.quorum.post("/v1/gateways/heartbeat", body)
        except (Unauthorized, Forbidden) as e:
            raise RegistrationRefused(
                f"the controllers refuse to register this gateway ({e.detail}): give the admin token with "
                "--token-file FILE"
            ) from None
        except KfedError as e:
            if isinstance(e, Conflict) and self.config.gateway_id is None:
                self.gateway_id = None  # the id this gateway had went to another: take a free one
            log.warning("gateway heartbeat failed: %s", e.detail)
            return False
        self.gateway_id = int(reply["gateway_id"])
        if self.producers.incarnation is None:
            self.producers.incarnation = int(reply["incarnation"])
        self.registered.set()
        return True

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._register()
                await self.followed.forget()
            except Exception:  # never let the loop die: the gateway would silently drop out
                log.exception("gateway heartbeat failed")

    async def stop(self) -> None:
        self._closing.set()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        await self.server.stop()
        self.members.stop()
        self.upstream.close()
        await self.quorum.close()
        await asyncio.to_thread(self.follower.stop)


def _tls(files: tuple[str, str] | None) -> ssl.SSLContext | None:
    if files is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files[0], files[1])
    return context
