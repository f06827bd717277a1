"""The Raft port's connections, bounded before anything is authenticated: part of the bridge into pysyncobj.

``BoundedConnection`` reads what it receives into a ``wire.FrameBuffer`` (a frame's declared length is checked as
soon as it arrives), and ``GuardedTransport`` bounds the connections that never say who they are and says when
the Raft port cannot be bound (pysyncobj retries in silence). ``SAFE_PICKLE`` decodes frames into plain values.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Final

import pysyncobj.tcp_connection as pso_tcp
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.node import TCPNode
from pysyncobj.transport import TCPTransport

from .. import wire
from ..wire import ForbiddenPickle, FrameBuffer, FrameTooLarge, SafePickle, inflate, value_class

log = logging.getLogger(__name__)


MAX_ADDRESS_CHARS: Final = 261
"""The longest Raft address a pickle may carry: a DNS name (253), a colon, a port."""


def received_node(address: Any) -> TCPNode:
    """The ``TCPNode`` a pickled one stands for, built from its address once that is checked to be one."""
    if not isinstance(address, str) or len(address) > MAX_ADDRESS_CHARS:
        raise ForbiddenPickle(f"a pickled TCPNode's address must be a str of at most {MAX_ADDRESS_CHARS} chars")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ForbiddenPickle(f"a pickled TCPNode's address {address!r} is not host:port")
    return TCPNode(address)


SAFE_PICKLE: Final = SafePickle({("pysyncobj.node", "TCPNode"): value_class(TCPNode, received_node, "_id")})
"""Decodes every Raft command: plain values, and the ``TCPNode`` a membership change carries (rebuilt as
``TCPNode(address)`` builds it, from an address checked first)."""
SAFE_FRAMES: Final = SafePickle()
"""Decodes every Raft frame (``BoundedConnection``): plain values only (a frame carries commands as bytes)."""


class BoundedConnection(pso_tcp.TcpConnection):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's TCP connection, with what it receives in a ``wire.FrameBuffer``: a frame's declared length is
    checked as soon as it arrives (``wire.MAX_FRAME_BYTES``; the first frame of an accepted connection:
    ``wire.HELLO_FRAME_BYTES``), before anything is authenticated; reading stops once a frame is whole; frames are
    decoded with ``SAFE_FRAMES``. Everything else (sockets, sending, timeouts, encryption) is pysyncobj's."""

    _TcpConnection__readBuffer: bytes
    recvLastTimestamp: int

    def __init__(
        self,
        poller: Any,
        onMessageReceived: Any = None,
        onConnected: Any = None,
        onDisconnected: Any = None,
        socket: Any = None,
        timeout: float = 10.0,
        sendBufferSize: int = 8192,
        recvBufferSize: int = 8192,
        keepalive: Any = None,
    ) -> None:
        # accepted (a socket given): a stranger until its first frame decodes (with a password: authenticates)
        self.kfed_frames = FrameBuffer(wire.MAX_FRAME_BYTES if socket is None else wire.HELLO_FRAME_BYTES)
        super().__init__(
            poller,
            onMessageReceived,
            onConnected,
            onDisconnected,
            socket,
            timeout,
            sendBufferSize,
            recvBufferSize,
            keepalive,
        )

    def disconnect(self) -> None:
        self.kfed_frames.clear()
        super().disconnect()

    def _TcpConnection__processRead(self) -> bool:
        """One recv() by pysyncobj's code; False (stop reading) once a frame is whole, or the connection dropped."""
        if not pso_tcp.TcpConnection._TcpConnection__processRead(self):
            return False
        received, self._TcpConnection__readBuffer = self._TcpConnection__readBuffer, b""  # b"" + bytes: no copy
        try:
            return self.kfed_frames.add(received)
        except FrameTooLarge as e:
            log.warning("dropped a Raft connection: %s", e)
            self.disconnect()
            return False

    def _TcpConnection__processParseMessage(self) -> Any:
        """The next whole frame's message, or None; a frame that does not decode drops the connection (as
        pysyncobj does), one that is too large too."""
        try:
            data = self.kfed_frames.next_frame()
            if data is None:
                return None
            if self.encryptor:
                stamp = self.encryptor.extract_timestamp(data)
                if stamp < self.recvLastTimestamp:
                    raise ValueError("a frame older than the last one")
                self.recvLastTimestamp = stamp
                data = self.encryptor.decrypt(data)
            message = SAFE_FRAMES.loads(inflate(data))
            if self.recvRandKey:
                rand_key, message = message
                if rand_key != self.recvRandKey:
                    raise ValueError("a frame of another connection")
        except Exception as e:  # whatever a peer sends must not raise in the tick
            log.warning("dropped a Raft connection: %s: %s", type(e).__name__, e)
            self.disconnect()
            return None
        self.kfed_frames.limit = wire.MAX_FRAME_BYTES
        return message


MAX_UNKNOWN_CONNECTIONS: Final = 16
"""Accepted connections that have not said which voter they are, at most; the oldest is dropped past it."""


class GuardedTransport(TCPTransport):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's TCP transport, bounding the connections it accepts until they say which voter they are (with
    a password: until they authenticate): at most ``MAX_UNKNOWN_CONNECTIONS``, each for at most pysyncobj's
    ``connectionTimeout``. pysyncobj kept each until it sent something wrong: idle ones, forever."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self._kfed_unknown: dict[Any, float] = {}  # accepted connection -> when, oldest first
        self._kfed_bind_failed = False
        super().__init__(syncObj, selfNode, otherNodes)
        if self._server is not None:  # None on a read-only node
            self._server.bind = functools.partial(self._kfed_bind, self._server.bind, selfNode.address)

    def _kfed_bind(self, bind: Callable[[], None], address: str) -> None:
        """``TcpServer.bind``, its failure said once: pysyncobj retries every second in silence."""
        try:
            bind()
        except OSError as e:
            if not self._kfed_bind_failed:
                log.error("cannot listen on the Raft address %s (%s): not in the quorum until it can", address, e)
            self._kfed_bind_failed = True
            raise
        if self._kfed_bind_failed:
            self._kfed_bind_failed = False
            log.warning("listening on the Raft address %s now", address)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        super()._onNewIncomingConnection(conn)
        unknown = self._kfed_unknown
        for known in [c for c in unknown if c not in self._unknownConnections]:
            del unknown[known]
        unknown[conn] = pysyncobj_clock()
        while len(unknown) > MAX_UNKNOWN_CONNECTIONS:
            oldest = next(iter(unknown))
            del unknown[oldest]
            log.warning(
                "dropped a Raft connection: more than %d that did not say who they are", MAX_UNKNOWN_CONNECTIONS
            )
            oldest.disconnect()

    def send(self, node: Any, message: Any) -> bool:
        """pysyncobj's, but not on a dialled connection whose key exchange is not done (with a password).

        pysyncobj counts a connection it dialled as connected once TCP is, and sends the Raft messages of the
        next tick on it unwrapped, while the peer still waits for the exchange to finish: the peer cannot
        decode them and drops the connection (seen when every voter restarted at once, and a candidate asked
        for votes). Until the exchange is done, the message is not sent, as on a connection still dialling."""
        conn = self._connections.get(node)
        if conn is not None and conn.encryptor is not None and not conn.sendRandKey:
            return False
        return bool(super().send(node, message))

    def _onTick(self) -> None:
        super()._onTick()
        if not self._kfed_unknown:
            return
        deadline = pysyncobj_clock() - self._syncObj.conf.connectionTimeout
        for conn, since in list(self._kfed_unknown.items()):
            if conn not in self._unknownConnections:
                del self._kfed_unknown[conn]
            elif since < deadline:
                del self._kfed_unknown[conn]
                log.warning("dropped a Raft connection that did not say who it is in time")
                conn.disconnect()
