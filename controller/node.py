"""One controller node: a Raft replica and the HTTP API on one asyncio loop in the main thread."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import uvicorn
from fastapi import FastAPI

from metadata_client.access import Access
from metadata_log.heap import freeze_survivors
from metadata_log.image import MetadataImage
from metadata_log.publisher import LogDelta, MetadataPublisher
from metadata_quorum import Mailboxes, RaftNode, RaftSettings
from metadata_quorum.state import LogState

from .auth import Tokens
from .config import QuorumConfig
from .drain import DEFAULT_GRACE_MS
from .http import build_app
from .leases import DEFAULT_HEARTBEAT_MS, DEFAULT_LEASE_MS
from .readmodel import DEFAULT_RETENTION_RECORDS, ReadModel
from .service import ControllerService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeSettings:
    retention_records: int = DEFAULT_RETENTION_RECORDS
    commit_timeout_s: float = 5.0
    lease_ms: int = DEFAULT_LEASE_MS
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    drain_grace_ms: int = DEFAULT_GRACE_MS
    join: bool = False  # a node new to a running quorum: do not campaign until a leader has added it
    raft: RaftSettings = field(default_factory=RaftSettings)
    tokens: Tokens = field(default_factory=Tokens)
    tls: TlsFiles | None = None


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """HTTPS for the API: this node's certificate chain and key, and the CA bundle it verifies the other
    voters with (None: the system's CAs)."""

    cert: Path
    key: Path
    ca: Path | None = None


def run_node(quorum: QuorumConfig, node_id: int, data_dir: Path, settings: NodeSettings) -> None:
    """Run until SIGTERM/SIGINT. pysyncobj must be built in this (main, long-lived) thread."""
    me = quorum.voter(node_id)
    peers = [v.raft for v in quorum.voters if v.id != node_id]
    loop = _new_event_loop()
    asyncio.set_event_loop(loop)

    read_model = ReadModel(settings.retention_records)
    mailboxes = Mailboxes()  # the read model's updates and the writes' replies, in order on the loop
    state = LogState(_OnLoop(loop, read_model, mailboxes))
    raft = RaftNode(me.raft, peers, data_dir, state, settings.raft, mailboxes)
    if settings.join:
        raft.hold_elections_until_led()
    _tune_gc()
    service = ControllerService(
        node_id,
        quorum,
        raft,
        state,
        read_model,
        settings.commit_timeout_s,
        settings.lease_ms,
        settings.heartbeat_ms,
        settings.drain_grace_ms,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        log.info("node %d serving %s (raft %s, data %s)", node_id, me.http, me.raft, data_dir)
        yield
        await service.stop()

    peer_verify = Access(ca_file=str(settings.tls.ca) if settings.tls and settings.tls.ca else None).verify()
    app = build_app(service, lifespan, settings.tokens, peer_verify)
    host, port = _host_port(me.http)
    tls = settings.tls
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",  # the loop is ours (see _new_event_loop)
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        ssl_certfile=str(tls.cert) if tls else None,
        ssl_keyfile=str(tls.key) if tls else None,
    )
    server = uvicorn.Server(config)
    try:
        loop.run_until_complete(server.serve())
    finally:
        raft.close()
        loop.close()


class _OnLoop:
    """Publishes on the Raft thread by handing each update over to ``publisher`` on ``loop``: in order with
    the node's replies (the same ``mailboxes``), never blocking."""

    def __init__(self, loop: asyncio.AbstractEventLoop, publisher: MetadataPublisher, mailboxes: Mailboxes) -> None:
        self._loop = loop
        self._publisher = publisher
        self._mailboxes = mailboxes

    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        self._mailboxes.hand_over(self._loop, self._publisher.on_update, delta, image)


def _tune_gc() -> None:
    """Keep the garbage collector from stalling the Raft thread on a big image.

    A full collection walks every object: with 1M partitions loaded it takes a third of a second, enough to miss
    heartbeats and force elections. What start-up loaded and replayed moves out of the collector's view
    (``freeze_survivors``, which ``LogState`` also runs as the image grows) and young collections run
    less often."""
    freeze_survivors()
    gc.set_threshold(50_000, 20, 100)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it exists (Linux, macOS). The node builds its loop itself: pysyncobj must be
    constructed in this thread, with the publisher bound to the loop that will serve the API."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; other platforms fall back
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.hostname or "127.0.0.1", port
