"""TCP proxies in front of each node's Raft port, able to cut exactly one node's links; and in front of each
node's HTTP port, able to lose every reply of one node (``HttpProxies``, at the end).

Every node advertises its proxy's address as its Raft address (quorum.toml) and listens on a port of
its own (``--raft-bind``). pysyncobj opens one connection per pair of nodes, from the node with the
greater address to the other one's advertised address, so a proxy carries connections *from* several
peers and cannot tell them apart by source address (all are 127.0.0.1). Each accepted connection is
therefore attributed to the process that owns its client socket: the connection's source port is looked
up in ``/proc/net/tcp`` (its socket inode) and the inode among the ``/proc/<pid>/fd`` links of the node
processes the harness started. A link is then the pair {proxy's node, client's node}.

``cut(n)`` closes every live connection of node n on every proxy (those into n's proxy and those n
opened to its peers' proxies) and refuses new ones until ``heal(n)``; a connection whose client cannot
be attributed is refused too, so a cut never leaks (its owner reconnects within 0.5 s when healed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PUMP_CHUNK_BYTES = 256 * 1024


def socket_inode(local_port: int, remote_port: int) -> int | None:
    """Inode of the IPv4 TCP socket 127.0.0.1:local_port -> *:remote_port, from /proc/net/tcp."""
    want_local, want_remote = f":{local_port:04X}", f":{remote_port:04X}"
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[1].endswith(want_local) and fields[2].endswith(want_remote):
                inode = int(fields[9])
                if inode:
                    return inode
    return None


def pid_owning(inode: int, pids: Iterable[tuple[int, int]]) -> int | None:
    """The node id (first of each pair) whose process (second) holds the socket ``inode``."""
    target = f"socket:[{inode}]"
    for node_id, pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        with contextlib.suppress(OSError):
            for fd in os.listdir(fd_dir):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{fd_dir}/{fd}") == target:
                        return node_id
    return None


@dataclass(eq=False)
class _Link:
    nodes: frozenset[int | None]
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def abort(self) -> None:
        for w in self.writers:
            w.transport.abort()


class RaftProxies:
    """One proxy per node, all on one asyncio loop in a daemon thread of the harness."""

    def __init__(self, routes: dict[int, tuple[int, int]], node_pids: Callable[[], dict[int, int]]) -> None:
        """``routes``: node id -> (proxy port, the node's real Raft port); ``node_pids``: live node PIDs."""
        self._routes = routes
        self._node_pids = node_pids
        self._cut: set[int] = set()
        self._links: set[_Link] = set()
        self.refused = 0
        self.unattributed = 0
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="raft-proxies", daemon=True)

    def start(self) -> None:
        self._thread.start()
        for node_id, (proxy_port, real_port) in self._routes.items():
            server = self._call(self._serve(node_id, proxy_port, real_port))
            self._servers.append(server)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            for s in self._servers:
                s.close()
            for link in list(self._links):
                link.abort()

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self, node_id: int) -> None:
        """Isolate ``node_id`` from its peers: its live Raft connections are closed, new ones refused."""

        async def do() -> None:
            self._cut.add(node_id)
            for link in [link for link in self._links if node_id in link.nodes]:
                link.abort()

        self._call(do())

    def heal(self, node_id: int | None = None) -> None:
        """Let ``node_id`` (every node when None) connect again."""

        async def do() -> None:
            if node_id is None:
                self._cut.clear()
            else:
                self._cut.discard(node_id)

        self._call(do())

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _serve(self, node_id: int, proxy_port: int, real_port: int) -> asyncio.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(node_id, real_port, proxy_port, reader, writer)

        return await asyncio.start_server(handle, "127.0.0.1", proxy_port, reuse_address=True)

    def _attribute(self, client_port: int, proxy_port: int) -> int | None:
        inode = socket_inode(client_port, proxy_port)
        if inode is None:
            return None
        return pid_owning(inode, self._node_pids().items())

    async def _handle(
        self, node_id: int, real_port: int, proxy_port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        client_port = writer.get_extra_info("peername")[1]
        client = await asyncio.get_running_loop().run_in_executor(None, self._attribute, client_port, proxy_port)
        if client is None:
            self.unattributed += 1
        if client is None or node_id in self._cut or client in self._cut:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", real_port)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(frozenset({node_id, client}), [writer, up_writer])
        if node_id in self._cut or client in self._cut:  # cut while we were connecting
            link.abort()
            return
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            self._links.discard(link)
            link.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(PUMP_CHUNK_BYTES):
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            writer.transport.abort()


class HttpProxies:
    """One TCP proxy per node in front of its HTTP port, for the clients (writers, tailers, agents).

    ``lose_replies(n)``: from now on every request through node n's proxy still reaches the node, but its
    reply never comes back: the client's connection is reset at the reply's first byte (live connections,
    long polls included, are reset at once). A write sent then may commit while its client sees only an
    unknown outcome: the partition that makes clients retry with the same Idempotency-Key. ``cut(n)``:
    nothing gets through, live connections are reset and new ones at once. ``heal(n)`` lets everything
    through again. Nodes talk to each other (forwarding to the leader) on their own ports.
    """

    def __init__(self, routes: dict[int, tuple[int, int]]) -> None:
        """``routes``: node id -> (proxy port, the node's real HTTP port)."""
        self._routes = routes
        self._lossy: set[int] = set()
        self._cut: set[int] = set()
        self._links: dict[int, set[_Link]] = {n: set() for n in routes}
        self.replies_lost = 0
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="http-proxies", daemon=True)

    def start(self) -> None:
        self._thread.start()
        for node_id, (proxy_port, real_port) in self._routes.items():
            self._servers.append(self._call(self._serve(node_id, proxy_port, real_port)))  # type: ignore[arg-type]

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            for s in self._servers:
                s.close()
            for links in self._links.values():
                for link in list(links):
                    link.abort()

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def lose_replies(self, node_id: int) -> None:
        async def do() -> None:
            self._lossy.add(node_id)
            for link in list(self._links[node_id]):
                link.abort()

        self._call(do())

    def cut(self, node_id: int | None = None) -> None:
        """Nothing through ``node_id``'s proxy (every node's when None) until healed."""
        nodes = set(self._routes) if node_id is None else {node_id}

        async def do() -> None:
            self._cut |= nodes
            for n in nodes:
                for link in list(self._links[n]):
                    link.abort()

        self._call(do())

    def heal(self, node_id: int | None = None) -> None:
        async def do() -> None:
            nodes = self._routes if node_id is None else {node_id}
            self._lossy.difference_update(nodes)
            self._cut.difference_update(nodes)

        self._call(do())

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _serve(self, node_id: int, proxy_port: int, real_port: int) -> asyncio.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if node_id in self._cut:
                writer.transport.abort()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", real_port)
            except OSError:
                writer.transport.abort()
                return
            link = _Link(frozenset({node_id}), [writer, up_writer])
            self._links[node_id].add(link)
            try:
                await asyncio.gather(
                    RaftProxies._pump(reader, up_writer), self._replies(node_id, up_reader, writer, link)
                )
            finally:
                self._links[node_id].discard(link)
                link.abort()

        return await asyncio.start_server(handle, "127.0.0.1", proxy_port, reuse_address=True)

    async def _replies(
        self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        try:
            while data := await reader.read(PUMP_CHUNK_BYTES):
                if node_id in self._lossy:
                    self.replies_lost += 1
                    link.abort()
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            writer.transport.abort()
