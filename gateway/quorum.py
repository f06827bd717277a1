"""The gateway's async client of the controllers' HTTP API (registration, groups, topic admin).

Fails over between controller URLs and retries what may be retried (no leader yet, a node down) within a
deadline, like ``metadata_client.client.ControllerClient``, without blocking the event loop. Writes carry one
``Idempotency-Key`` for all their attempts. A failure is raised as the error tree's class of the reply
(``metadata_client.client.reply_error``): ``Conflict``, ``NotFound``, ``InvalidRequest``..., or ``Unavailable``
(no controller reached) and ``OutcomeUnknown`` (a write timed out) when the deadline passes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, Final

import httpx

from metadata_client.access import NO_ACCESS, Access, tls_context
from metadata_client.client import controller_urls, reply_error
from metadata_log.errors import KfedError, OutcomeUnknown, Unavailable

DEFAULT_DEADLINE_S: Final = 5.0
REQUEST_TIMEOUT_S: Final = 5.0


class QuorumClient:
    def __init__(self, controllers: Sequence[str] | str, access: Access = NO_ACCESS) -> None:
        self.urls = controller_urls(controllers)
        self._current = 0
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=1.0),
            headers=access.headers,
            verify=tls_context(access.ca_file),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    async def request(
        self, method: str, path: str, body: Any = None, deadline_s: float = DEFAULT_DEADLINE_S
    ) -> dict[str, Any]:
        headers = {} if method == "GET" else {"Idempotency-Key": str(uuid.uuid4())}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s
        delay = 0.05
        last: KfedError
        while True:
            url = self.urls[self._current]
            try:
                r = await self._http.request(method, url + path, json=body, headers=headers)
            except httpx.TimeoutException as e:
                last = OutcomeUnknown(f"{url}: timed out ({type(e).__name__})")
            except httpx.HTTPError as e:
                last = Unavailable(f"{url}: {type(e).__name__}: {e}")
            else:
                if r.status_code < 400:
                    reply = r.json()
                    return reply if isinstance(reply, dict) else {"value": reply}
                last = reply_error(url, r)
                if not last.retryable:
                    raise last
            if loop.time() + delay > deadline:
                raise last
            self._current = (self._current + 1) % len(self.urls)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def post(self, path: str, body: Any = None, deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        return await self.request("POST", path, body, deadline_s)

    async def get(self, path: str, deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        return await self.request("GET", path, None, deadline_s)

    async def delete(self, path: str, deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        return await self.request("DELETE", path, None, deadline_s)

    async def close(self) -> None:
        await self._http.aclose()
