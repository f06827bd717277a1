"""The retry policy of every call to the controllers' HTTP API, without I/O.

One ``Call`` is one request's state machine (the shape of httpx's ``BaseClient``, or h11's connection): a
transport sends the request to ``call.url`` with ``call.headers``, hands what came back to
``call.decide(outcome, now)`` (the reply, or the transport's error) with a reading of its monotonic clock,
and does what the decision says: ``Return`` the value, ``Raise`` the error, or ``Wait`` and send again to
the URL named. ``ControllerClient`` (sync) and ``AsyncControllerClient`` (async) are such transports.

The rules, in the order they apply:

- a reply below 400 whose body is a JSON object is the answer;
- anything else is an error of the kfed tree (``reply_error``; a timeout is ``OutcomeUnknown``, a
  connection that failed ``Unavailable``); one that is not ``retryable`` is raised at once;
- a retryable one is tried again on the next URL of the bootstrap list (in order, wrapping around), after
  an exponential back-off from ``BACKOFF_MIN_S``, or after the reply's ``Retry-After`` when it asks for
  longer; either way never more than ``WAIT_MAX_S``;
- when that wait would end after the deadline, the last error is raised instead;
- a write carries one ``Idempotency-Key`` for all its attempts, so a retry after a timeout, a 503 (no
  leader yet) or a 504 (outcome unknown) can never apply it twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx

from metadata_log.errors import KfedError, NotAController, OutcomeUnknown, Unavailable, class_for_status

PROBLEM_JSON: Final = "application/problem+json"
_PROBLEM_FIELDS: Final = frozenset({"type", "title", "status", "detail"})

BACKOFF_MIN_S: Final = 0.05
"""The first back-off; each retry doubles it."""
WAIT_MAX_S: Final = 1.0
"""The one cap on a wait between attempts, back-off and ``Retry-After`` alike: a controller's hints are at
most a second (an election, a leader change), and a caller's deadline is a few seconds, so a longer wait
would spend it on one attempt instead of failing over."""


def controller_urls(controllers: Sequence[str] | str) -> list[str]:
    """A bootstrap list of controller URLs, given as a list or comma-separated, like bootstrap.servers."""
    urls = controllers.split(",") if isinstance(controllers, str) else list(controllers)
    cleaned = [u.strip().rstrip("/") for u in urls if u.strip()]
    if not cleaned:
        raise ValueError("at least one controller URL is needed (e.g. http://127.0.0.1:8001)")
    return cleaned


@dataclass(frozen=True, slots=True)
class Return:
    """The call succeeded: ``value`` is the decoded JSON reply (every answer of the API is an object)."""

    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Raise:
    """The call failed: raise ``error``."""

    error: KfedError


@dataclass(frozen=True, slots=True)
class Wait:
    """Try again: wait ``wait_s`` seconds, then send to ``url`` (a base URL of the bootstrap list)."""

    wait_s: float
    url: str


Decision = Return | Raise | Wait


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


class Call:
    """One request to the controllers: where its next attempt goes, with which headers, and what to do with
    each outcome. ``urls`` is the bootstrap list, tried from index ``first``; the call gives up at
    ``deadline_at`` (the same clock as the ``now`` given to ``decide``)."""

    def __init__(
        self,
        urls: Sequence[str],
        method: str,
        deadline_at: float,
        *,
        first: int = 0,
        idempotency_key: str | None = None,
        new_key: Callable[[], str] = new_idempotency_key,
    ) -> None:
        self.urls = tuple(urls)
        self.index = first % len(self.urls)
        self.deadline_at = deadline_at
        self.attempts = 0
        self.headers: Mapping[str, str] = {}
        if method.upper() != "GET":  # a write: one key for every attempt
            self.headers = {"Idempotency-Key": idempotency_key or new_key()}

    @property
    def url(self) -> str:
        """The base URL the next attempt goes to."""
        return self.urls[self.index]

    def decide(self, outcome: httpx.Response | httpx.RequestError, now: float) -> Decision:
        """What to do after an attempt: ``outcome`` is the reply (its body read) or the transport's error,
        ``now`` the clock when it came."""
        self.attempts += 1
        url = self.url
        retry_after: float | None = None
        if isinstance(outcome, httpx.TimeoutException):
            error: KfedError = OutcomeUnknown(f"{url}: timed out ({type(outcome).__name__})")
        elif isinstance(outcome, httpx.RequestError):
            error = Unavailable(f"{url}: {type(outcome).__name__}: {outcome}")
        elif outcome.status_code < 400 and _media_type(outcome) == "application/json":
            value = outcome.json()
            if isinstance(value, dict):
                return Return(value)
            error = NotAController(url, outcome.status_code, "JSON that is not an object")
        else:
            error = reply_error(url, outcome)
            retry_after = retry_after_s(outcome.headers)
        if not error.retryable:
            return Raise(error)
        wait_s = backoff_s(self.attempts, retry_after)
        if now + wait_s > self.deadline_at:
            return Raise(error)
        self.index = (self.index + 1) % len(self.urls)
        return Wait(wait_s, self.url)


def backoff_s(attempts: int, retry_after: float | None = None) -> float:
    """The wait after the ``attempts``-th failed attempt: ``BACKOFF_MIN_S`` doubled per attempt, or what
    ``Retry-After`` asked for when that is longer, never above ``WAIT_MAX_S``."""
    exponential = BACKOFF_MIN_S * 2.0 ** min(attempts - 1, 32)
    return min(max(exponential, retry_after or 0.0), WAIT_MAX_S)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The seconds a reply's ``Retry-After`` asks for (RFC 9110 §10.2.3), or None when it has none that
    reads. Its HTTP-date form is measured against the reply's own ``Date``, so the server's clock and this
    one need not agree; without a ``Date`` it is not read."""
    value = headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        then = parsedate_to_datetime(value)
        sent = parsedate_to_datetime(headers.get("date", ""))
        return max(0.0, (then - sent).total_seconds())
    except (TypeError, ValueError):  # not a date, or no Date to measure it from
        return None


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
