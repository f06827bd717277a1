"""The outermost middleware: the request body limit, and request latency by route for ``/metrics``."""

from __future__ import annotations

import time
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metadata_log.errors import PayloadTooLarge

from .. import metrics, problems

MAX_REQUEST_BYTES: Final = 1024 * 1024


class MeasureAndLimit:
    """Refuses bodies over MAX_REQUEST_BYTES (413, also when chunked) and records request latency by route.

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware adds a task group
    and a response stream per request, which cost a measurable share of requests/s here."""

    def __init__(self, app: ASGIApp, latency: metrics.RequestLatency) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        too_large = PayloadTooLarge(f"request body exceeds {MAX_REQUEST_BYTES} bytes", limit_bytes=MAX_REQUEST_BYTES)
        received = 0

        async def receive_at_most() -> Message:
            """A chunked body has no Content-Length: count what arrives and stop at the limit."""
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_REQUEST_BYTES:
                    raise too_large
            return message

        try:
            length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
            if length is not None and (not length.isdigit() or int(length) > MAX_REQUEST_BYTES):
                await problems.kfed_error_response(too_large)(scope, receive, send_and_note)
            else:
                await self.app(scope, receive_at_most, send_and_note)
        finally:
            route = scope.get("route")
            self.latency.observe(
                scope["method"], getattr(route, "path", "unmatched"), status, time.perf_counter() - started
            )
