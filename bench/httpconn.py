"""A lean HTTP/1.1 client on asyncio streams, so the load generators spend little CPU per request.

On a 2-core machine shared with three controller processes, a heavyweight client would measure itself.
One ``Connection`` is one keep-alive TCP connection, used by one task at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

IDLE_RECONNECT_S = 3.0
"""A connection idle longer than this is replaced before use (uvicorn's keep-alive timeout is 5 s)."""


class ProtocolError(Exception):
    """A response this client does not understand."""


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    TimeoutError,
    ProtocolError,
)
"""What a request can raise when the node is down, slow or the connection broke; retry elsewhere."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return orjson.loads(self.body)


class Connection:
    """One keep-alive connection to ``base_url`` (``http://host:port``); reconnects after an error."""

    def __init__(self, base_url: str, source_host: str | None = None) -> None:
        """``source_host``: the local address to connect from (a loopback one, 127.0.0.2 and up, stands for
        another client machine: the controllers bound some resources per client address)."""
        parts = urlsplit(base_url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"need http://host:port, got {base_url!r}")
        self.base_url = base_url
        self._host = parts.hostname
        self._port = parts.port
        self._local_addr = (source_host, 0) if source_host is not None else None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._last_used = 0.0

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        now = time.monotonic()
        if now - self._last_used > IDLE_RECONNECT_S:
            self.abort()  # the server may be closing it right now (uvicorn drops idle ones after 5 s)
        self._last_used = now
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                self._host, self._port, limit=1 << 22, local_addr=self._local_addr
            )
        return self._reader, self._writer

    def _head(self, method: str, path: str, body: bytes | None, extra: dict[str, str] | None) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout_s: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """Send one request and read the whole response; raises one of ``TRANSPORT_ERRORS``."""
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await self._open()
                writer.write(self._head(method, path, body, headers) + (body or b""))
                status, resp_headers = await _read_head(reader)
                data = await _read_body(reader, resp_headers)
            self._last_used = time.monotonic()
        except BaseException:
            self.abort()
            raise
        if resp_headers.get("connection", "").lower() == "close":
            self.abort()
        return Reply(status, data)

    async def stream(self, path: str, connect_timeout_s: float = 10.0) -> AsyncGenerator[bytes, None]:
        """GET ``path`` and yield the pieces of a chunked body as they arrive (for Server-Sent Events)."""
        try:
            async with asyncio.timeout(connect_timeout_s):
                reader, writer = await self._open()
                writer.write(self._head("GET", path, None, {"Accept": "text/event-stream"}))
                status, headers = await _read_head(reader)
            if status != 200:
                body = await _read_body(reader, headers)
                raise ProtocolError(f"GET {path}: {status} {body[:200]!r}")
            if headers.get("transfer-encoding", "").lower() != "chunked":
                raise ProtocolError("expected a chunked event stream")
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise asyncio.IncompleteReadError(b"", None)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    return
                chunk = await reader.readexactly(size + 2)
                yield chunk[:-2]
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop the connection (the next request reconnects)."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        writer = self._writer
        self.abort()
        if writer is not None:
            with contextlib.suppress(OSError, RuntimeError):
                await writer.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise ProtocolError(f"bad status line {lines[0]!r}") from None
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return b"".join(parts)
            parts.append((await reader.readexactly(size + 2))[:-2])
    return b""
