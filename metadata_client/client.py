"""The clients of the quorum's HTTP API: ``ControllerClient`` (sync) and ``AsyncControllerClient`` (async).

Both are thin transports over one retry policy (``retry.Call``): they send, read the clock and sleep; the
policy decides failover between the bootstrap URLs, back-off, ``Retry-After``, the deadline and the error to
raise (the kfed error tree). Both share one shape of call: ``post(path, json, deadline_s)``, where
``deadline_s`` (by default the client's) bounds all the attempts together, and a write may name its
``idempotency_key`` (by default a new one, the same for all its attempts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

import httpx

from metadata_log.records import LATEST_METADATA_VERSION
from metadata_log.views import MAX_TOPICS_PAGE

from .access import NO_ACCESS, Access
from .retry import Call, Decision, Raise, Return, controller_urls

DEFAULT_DEADLINE_S: Final = 15.0
DEFAULT_TIMEOUT_S: Final = 10.0
"""How long one attempt may take, reading the reply included."""
DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0


class BaseControllerClient:
    """What the sync and the async client share: the bootstrap list, the URL that answered last (where the
    next call starts), the deadline, and how a call is started and settled."""

    def __init__(self, controllers: Sequence[str] | str, deadline_s: float) -> None:
        self.urls = controller_urls(controllers)
        self.deadline_s = deadline_s
        self._current = 0

    def _call(self, method: str, idempotency_key: str | None, deadline_s: float | None, now: float) -> Call:
        deadline = self.deadline_s if deadline_s is None else deadline_s
        return Call(self.urls, method, now + deadline, first=self._current, idempotency_key=idempotency_key)

    def _moved(self, call: Call) -> None:
        """Start the next calls where this one goes next: a URL that failed is not tried first again."""
        self._current = call.index

    @staticmethod
    def _settle(decision: Return | Raise) -> dict[str, Any]:
        if isinstance(decision, Raise):
            raise decision.error
        return decision.value


class ControllerClient(BaseControllerClient):
    """Sync client for admin writes and reads; fails over between URLs and retries within a deadline."""

    def __init__(
        self,
        controllers: Sequence[str] | str,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        access: Access = NO_ACCESS,
        client: httpx.Client | None = None,
    ) -> None:
        """``client``: the HTTP client to send with (by default one with ``access``'s token and CA, and these
        timeouts); closed with this one."""
        super().__init__(controllers, deadline_s)
        self._http = client or access.http_client(httpx.Timeout(timeout_s, connect=connect_timeout_s))

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """The decoded JSON reply; retries what may be retried, as ``retry.Call`` decides."""
        call = self._call(method, idempotency_key, deadline_s, time.monotonic())
        while True:
            outcome: httpx.Response | httpx.RequestError
            try:
                outcome = self._http.request(method, call.url + path, json=json, params=params, headers=call.headers)
            except httpx.RequestError as e:
                outcome = e
            decision: Decision = call.decide(outcome, time.monotonic())
            if isinstance(decision, Return | Raise):
                return self._settle(decision)
            self._moved(call)
            time.sleep(decision.wait_s)

    def get(self, path: str, deadline_s: float | None = None, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=reader_params(path, params), deadline_s=deadline_s)

    def post(
        self, path: str, json: Any = None, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self.request("POST", path, json, idempotency_key=idempotency_key, deadline_s=deadline_s)

    def topic(self, name: str) -> dict[str, Any]:
        """``GET /v1/topics/{name}`` with every partition: its pages read one after another (a page is of one
        offset each; a page read later may be at a later offset, as two reads of the topic would be)."""
        view = self.get(f"/v1/topics/{name}")
        partitions = view["partitions"]
        while view.get("next_partition") is not None:
            view = self.get(f"/v1/topics/{name}", first_partition=view["next_partition"])
            partitions += view["partitions"]
        return {**view, "partitions": partitions, "next_partition": None}

    def put(
        self, path: str, json: Any = None, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self.request("PUT", path, json, idempotency_key=idempotency_key, deadline_s=deadline_s)

    def delete(
        self, path: str, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self.request("DELETE", path, idempotency_key=idempotency_key, deadline_s=deadline_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncControllerClient(BaseControllerClient):
    """Async client for processes that serve from an event loop (the gateway): the same calls and the same
    policy as ``ControllerClient``, without blocking the loop while it waits."""

    def __init__(
        self,
        controllers: Sequence[str] | str,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        access: Access = NO_ACCESS,
        max_connections: int = 64,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """``client``: as ``ControllerClient``'s."""
        super().__init__(controllers, deadline_s)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections // 4)
        self._http = client or access.async_http_client(httpx.Timeout(timeout_s, connect=connect_timeout_s), limits)

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """The decoded JSON reply; retries what may be retried, as ``retry.Call`` decides."""
        loop = asyncio.get_running_loop()
        call = self._call(method, idempotency_key, deadline_s, loop.time())
        while True:
            outcome: httpx.Response | httpx.RequestError
            try:
                outcome = await self._http.request(
                    method, call.url + path, json=json, params=params, headers=call.headers
                )
            except httpx.RequestError as e:
                outcome = e
            decision: Decision = call.decide(outcome, loop.time())
            if isinstance(decision, Return | Raise):
                return self._settle(decision)
            self._moved(call)
            await asyncio.sleep(decision.wait_s)

    async def get(self, path: str, deadline_s: float | None = None, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=reader_params(path, params), deadline_s=deadline_s)

    async def post(
        self, path: str, json: Any = None, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return await self.request("POST", path, json, idempotency_key=idempotency_key, deadline_s=deadline_s)

    async def topic_sizes(self) -> tuple[int, dict[str, int]]:
        """Every logical topic's partition count, by name, and the newest offset the listing was read at:
        ``GET /v1/metadata`` read in pages of topics listed without their partitions (a page is of one offset
        each, as in ``ControllerClient.topic``)."""
        sizes: dict[str, int] = {}
        offset = -1
        params: dict[str, Any] = {"partition_limit": 0, "topic_limit": MAX_TOPICS_PAGE}
        while True:
            page = await self.get("/v1/metadata", **params)
            sizes.update((t["name"], int(t["partition_count"])) for t in page["topics"])
            offset = max(offset, int(page["offset"]))
            if page.get("next_topic") is None:
                return offset, sizes
            params["first_topic"] = page["next_topic"]

    async def put(
        self, path: str, json: Any = None, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return await self.request("PUT", path, json, idempotency_key=idempotency_key, deadline_s=deadline_s)

    async def delete(
        self, path: str, deadline_s: float | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return await self.request("DELETE", path, idempotency_key=idempotency_key, deadline_s=deadline_s)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncControllerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


READS: Final = {"metadata_version": LATEST_METADATA_VERSION}
"""The query parameter of a reader of records that reads every version this code does (for a plain HTTP client)."""

LOG_PATHS: Final = ("/v1/log", "/v1/log/stream", "/v1/snapshot")
"""The paths that serve records: a reader says which metadata version it reads (``metadata_version``)."""


def reader_params(path: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """``params`` of a GET, with the metadata version this code reads where ``path`` serves records."""
    if path.split("?", 1)[0] in LOG_PATHS:
        params = {**READS, **params}
    return params or None
