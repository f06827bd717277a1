"""What a Kafka request handler may use: one small frozen context per job, never the gateway itself.

``app.Gateway`` builds each context once and binds every handler to its job's (``bind``), so the listener
calls a handler with the connection and the request only. A handler thus reaches the parts of the gateway
its job needs, and none of the rest (registration, heartbeats, the log follower, the listener):

- ``AdminContext``: ApiVersions, Metadata, FindCoordinator, InitProducerId, topic admin, SASL (``admin.py``);
- ``ProduceContext``: Produce, plain and strict (``produce.py``, ``strict.py``);
- ``FetchContext``: Fetch and ListOffsets (``fetch.py``);
- ``GroupContext``: the group protocol and committed offsets (``groups.py``, ``offsets.py``).

What changes while the gateway runs (the followed image) is read through ``view()``: the cluster view of the
image as it is now. The image holds the topics this gateway's clients use (``followed.py``): a handler first
``resolve``s the topics its request names (at once when they are followed, else after their snapshot is
loaded), then reads the view. This module imports no handler.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kafka_wire import protocol as kp
from kafka_wire.upstream import Upstream

from .members import Members
from .producers import ProducerIds
from .server import ClientConnection, Handler, Limits
from .view import ClusterView, TopicView

C = TypeVar("C")
JobHandler = Callable[[C, ClientConnection, kp.Request], Awaitable[Any]]
"""A handler before it is bound: its job's context, the connection, the request."""


class Quorum(Protocol):
    """The calls handlers make to the controllers' HTTP API (topic admin, groups)."""

    async def post(self, path: str, json: Any = None, deadline_s: float | None = None) -> dict[str, Any]: ...

    async def delete(self, path: str, deadline_s: float | None = None) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class AdminContext:
    view: Callable[[], ClusterView]
    resolve: Callable[[Collection[str]], Awaitable[None]]
    """Follow these topics before answering for them (``followed.py``)."""
    every_topic: Callable[[], Awaitable[tuple[list[str], bool]]]
    """The topics a request for every topic is answered with, and whether whole (else by name only)."""
    topic_metadata: Callable[[ClusterView, TopicView, bool], dict[str, Any]]
    """A topic's Metadata entry for producers (True) or consumers, built once per view."""
    served_versions: Mapping[int, tuple[int, int]]
    producers: ProducerIds
    quorum: Quorum
    cluster_name: str
    region: str | None  # where CreateTopics puts topics; None: the federation's only region
    admin_token: str | None  # the SASL/PLAIN password of topic admin
    client_tokens: tuple[str, ...]  # the SASL/PLAIN passwords of clients that may produce and consume


@dataclass(frozen=True, slots=True)
class ProduceContext:
    view: Callable[[], ClusterView]
    resolve: Callable[[Collection[str]], Awaitable[None]]
    upstream: Upstream
    producers: ProducerIds
    limits: Limits
    key_order_lease_held: Callable[[], bool]
    """Whether a controller confirmed the followed image lately (else a strict topic's keyed records wait)."""


@dataclass(frozen=True, slots=True)
class FetchContext:
    view: Callable[[], ClusterView]
    resolve: Callable[[Collection[str]], Awaitable[None]]
    upstream: Upstream
    limits: Limits
    members: Members  # whose groups a strict topic's reads are held back for


@dataclass(frozen=True, slots=True)
class GroupContext:
    view: Callable[[], ClusterView]
    resolve: Callable[[Collection[str]], Awaitable[None]]
    upstream: Upstream
    members: Members
    quorum: Quorum


def bind(context: C, handlers: Mapping[int, tuple[JobHandler[C], bool]]) -> dict[int, tuple[Handler, bool]]:
    """``handlers`` (per API key: the handler and whether it is ordered, see ``KafkaServer``) bound to
    ``context``, as the listener calls them."""
    return {key: (functools.partial(handler, context), ordered) for key, (handler, ordered) in handlers.items()}
