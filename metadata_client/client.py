"""``ControllerClient``: call the quorum's HTTP API from a bootstrap list of controller URLs.

Every write gets one ``Idempotency-Key`` for all its attempts, so retrying after a timeout, a 503 (no
leader yet) or a 504 (outcome unknown) can never apply twice. Errors come back as the kfed error tree.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

import httpx

from metadata_log.errors import KfedError, NotAController, OutcomeUnknown, Unavailable, class_for_status

from .access import NO_ACCESS, Access

PROBLEM_JSON: Final = "application/problem+json"
_PROBLEM_FIELDS: Final = frozenset({"type", "title", "status", "detail"})


def controller_urls(controllers: Sequence[str] | str) -> list[str]:
    """A bootstrap list of controller URLs, given as a list or comma-separated, like bootstrap.servers."""
    urls = controllers.split(",") if isinstance(controllers, str) else list(controllers)
    cleaned = [u.strip().rstrip("/") for u in urls if u.strip()]
    if not cleaned:
        raise ValueError("at least one controller URL is needed (e.g. http://127.0.0.1:8001)")
    return cleaned


DEFAULT_DEADLINE_S: Final = 15.0


class ControllerClient:
    """Sync client for admin writes and reads; fails over between URLs and retries within a deadline."""

    def __init__(
        self,
        controllers: Sequence[str] | str,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        timeout_s: float = 10.0,
        access: Access = NO_ACCESS,
    ) -> None:
        self.urls = controller_urls(controllers)
        self.deadline_s = deadline_s
        self._current = 0
        self._http = access.http_client(httpx.Timeout(timeout_s, connect=2.0))

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """The decoded JSON reply; retries retryable failures on the next URL until the deadline."""
        headers = {}
        if method != "GET":
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        deadline = time.monotonic() + self.deadline_s
        delay = 0.05
        last: KfedError | None = None
        while True:
            url = self.urls[self._current]
            try:
                r = self._http.request(method, url + path, json=json, params=params, headers=headers)
            except httpx.TimeoutException as e:
                last = OutcomeUnknown(f"{url}: timed out ({type(e).__name__})")
            except httpx.TransportError as e:
                last = Unavailable(f"{url}: {type(e).__name__}: {e}")
            else:
                if r.status_code < 400 and _media_type(r) == "application/json":
                    return r.json()
                error = reply_error(url, r)
                if not error.retryable:
                    raise error
                last = error
                retry_after = r.headers.get("retry-after")
                if retry_after and retry_after.isdigit():
                    delay = min(float(retry_after), 1.0)
            if time.monotonic() + delay > deadline:
                assert last is not None
                raise last
            self._current = (self._current + 1) % len(self.urls)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, json: Any = None, idempotency_key: str | None = None) -> Any:
        return self.request("POST", path, json, idempotency_key=idempotency_key)

    def put(self, path: str, json: Any = None, idempotency_key: str | None = None) -> Any:
        return self.request("PUT", path, json, idempotency_key=idempotency_key)

    def delete(self, path: str, idempotency_key: str | None = None) -> Any:
        return self.request("DELETE", path, idempotency_key=idempotency_key)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reply_error(url: str, r: httpx.Response) -> KfedError:
    """The kfed error a reply from ``url`` stands for: the class of its status (``errors.class_for_status``)
    with the problem+json members, or ``NotAController`` when the reply is not kfed's (its body is not
    quoted: it may be a whole HTML page)."""
    body: Any = None
    if _media_type(r) == PROBLEM_JSON and r.status_code >= 400:
        try:
            body = r.json()
        except ValueError:
            body = None
    if not isinstance(body, dict) or not isinstance(body.get("detail"), str):
        return NotAController(url, r.status_code, r.headers.get("content-type", ""))
    members = {k: v for k, v in body.items() if k not in _PROBLEM_FIELDS}
    cls = class_for_status(r.status_code)
    error = cls.from_problem(body["detail"], members)
    if cls is KfedError:  # a status no kfed error class has (a crash's 500, a 405): keep what it said
        error.status = r.status_code
        error.title = str(body.get("title") or "Error")
    return error


def _media_type(r: httpx.Response) -> str:
    content_type: str = r.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower()
