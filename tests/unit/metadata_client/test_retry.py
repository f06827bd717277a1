"""The one retry policy of the controllers' clients, decided without I/O: each test hands ``Call.decide`` a
reply or a transport error and a reading of a fake clock, and checks the decision."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from metadata_client.retry import (
    BACKOFF_MIN_S,
    WAIT_MAX_S,
    Call,
    Raise,
    Return,
    Wait,
    retry_after_s,
)
from metadata_log.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    KfedError,
    NotAController,
    NotFound,
    OutcomeUnknown,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)

URLS = ("http://a:1", "http://b:1", "http://c:1")
FAR = 1e9  # a deadline no test reaches


def problem(status: int, headers: dict[str, str] | None = None, **members: Any) -> httpx.Response:
    body = {"type": "about:blank", "title": "t", "status": status, "detail": "d", **members}
    return httpx.Response(
        status, content=orjson.dumps(body), headers={"content-type": "application/problem+json", **(headers or {})}
    )


def unavailable(retry_after: str | None = None, date: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    if date is not None:
        headers["Date"] = date
    return problem(503, headers)


def request_error(cls: type[httpx.RequestError]) -> httpx.RequestError:
    return cls("boom", request=httpx.Request("GET", "http://a:1/v1/x"))


def test_a_json_object_below_400_is_the_answer() -> None:
    call = Call(URLS, "GET", FAR)
    assert call.decide(httpx.Response(200, json={"offset": 3}), now=0.0) == Return({"offset": 3})


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (problem(404), NotFound),
        (problem(409), Conflict),
        (problem(422, field="name"), InvalidRequest),
        (problem(401), Unauthorized),
        (problem(403), Forbidden),
        (problem(500), KfedError),  # a crash: sending it again crashes again
        (httpx.Response(200, text="<html>hi</html>", headers={"content-type": "text/html"}), NotAController),
        (httpx.Response(200, json=[1, 2]), NotAController),  # no answer of the API is a bare array
        (httpx.Response(501, text="<html/>", headers={"content-type": "text/html"}), NotAController),
    ],
    ids=["404", "409", "422", "401", "403", "500", "html-200", "json-array", "html-501"],
)
def test_an_error_that_cannot_pass_is_raised_at_once(reply: httpx.Response, error: type[KfedError]) -> None:
    call = Call(URLS, "POST", FAR)
    decision = call.decide(reply, now=0.0)
    assert isinstance(decision, Raise) and type(decision.error) is error
    assert call.url == URLS[0]  # not failed over either


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (unavailable(), Unavailable),
        (problem(504), OutcomeUnknown),
        (problem(429), TooManyRequests),
        (httpx.Response(502, text="<html/>", headers={"content-type": "text/html"}), NotAController),  # a proxy's
        (request_error(httpx.ConnectError), Unavailable),
        (request_error(httpx.ReadTimeout), OutcomeUnknown),  # a write may have been applied
        (request_error(httpx.RemoteProtocolError), Unavailable),
    ],
    ids=["503", "504", "429", "proxy-502", "connect-error", "read-timeout", "protocol-error"],
)
def test_a_passing_failure_is_tried_again_and_its_error_raised_at_the_deadline(
    outcome: httpx.Response | httpx.RequestError, error: type[KfedError]
) -> None:
    assert isinstance(Call(URLS, "POST", FAR).decide(outcome, now=0.0), Wait)
    last = Call(URLS, "POST", deadline_at=10.0).decide(outcome, now=10.0)
    assert isinstance(last, Raise) and isinstance(last.error, error) and last.error.retryable


def test_the_back_off_doubles_from_its_minimum_up_to_the_one_cap() -> None:
    call = Call(URLS, "GET", FAR)
    waits = []
    for _ in range(8):
        decision = call.decide(unavailable(), now=0.0)
        assert isinstance(decision, Wait)
        waits.append(decision.wait_s)
    doubling = [BACKOFF_MIN_S * 2**i for i in range(8)]
    assert waits == [min(wait, WAIT_MAX_S) for wait in doubling]
    assert waits[0] < waits[4] < WAIT_MAX_S == waits[5] == waits[7], "it doubles, then the cap holds"


@pytest.mark.parametrize(
    ("retry_after", "wait_s"),
    [
        ("1", 1.0),  # longer than the first back-off: honoured
        ("30", WAIT_MAX_S),  # bounded by the cap
        ("0", BACKOFF_MIN_S),  # "now": the back-off still spaces the attempts
        ("soon", BACKOFF_MIN_S),  # unreadable: as if absent
        ("-1", BACKOFF_MIN_S),
        ("", BACKOFF_MIN_S),
    ],
)
def test_retry_after_in_seconds_is_honoured_within_the_cap(retry_after: str, wait_s: float) -> None:
    decision = Call(URLS, "GET", FAR).decide(unavailable(retry_after), now=0.0)
    assert decision == Wait(wait_s, URLS[1])


@pytest.mark.parametrize(
    ("retry_after", "date", "wait_s"),
    [
        ("Wed, 21 Oct 2015 07:28:01 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", 1.0),
        ("Wed, 21 Oct 2015 07:29:00 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", WAIT_MAX_S),
        ("Wed, 21 Oct 2015 07:27:00 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", BACKOFF_MIN_S),  # already past
        ("Wed, 21 Oct 2015 07:28:01 GMT", None, BACKOFF_MIN_S),  # no Date to measure it from
    ],
)
def test_retry_after_as_a_date_is_measured_from_the_replys_date(
    retry_after: str, date: str | None, wait_s: float
) -> None:
    decision = Call(URLS, "GET", FAR).decide(unavailable(retry_after, date), now=0.0)
    assert decision == Wait(wait_s, URLS[1])


def test_retry_after_reads_both_forms() -> None:
    assert retry_after_s(httpx.Headers({"Retry-After": "2"})) == 2.0
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after_s(httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:03 GMT", "Date": date})) == 3.0
    assert retry_after_s(httpx.Headers({})) is None


def test_a_wait_that_would_end_after_the_deadline_raises_the_last_error_instead() -> None:
    call = Call(URLS, "POST", deadline_at=10.0)
    assert call.decide(request_error(httpx.ReadTimeout), now=8.0) == Wait(BACKOFF_MIN_S, URLS[1])
    assert call.decide(unavailable("1"), now=9.0) == Wait(1.0, URLS[2])  # ends exactly at the deadline
    last = call.decide(request_error(httpx.ReadTimeout), now=9.9)  # a 0.2 s back-off: past it
    assert isinstance(last, Raise) and isinstance(last.error, OutcomeUnknown)
    assert call.attempts == 3


def test_the_deadline_counts_the_retry_after_wait() -> None:
    call = Call(URLS, "GET", deadline_at=10.0)
    decision = call.decide(unavailable("1"), now=9.5)  # a back-off would fit, the asked wait does not
    assert isinstance(decision, Raise) and isinstance(decision.error, Unavailable)


def test_failover_goes_down_the_bootstrap_list_from_where_it_starts_and_wraps() -> None:
    call = Call(URLS, "GET", FAR, first=1)
    assert call.url == URLS[1]
    visited = [call.url]
    for _ in range(4):
        decision = call.decide(request_error(httpx.ConnectError), now=0.0)
        assert isinstance(decision, Wait) and decision.url == call.url
        visited.append(call.url)
    assert visited == [URLS[1], URLS[2], URLS[0], URLS[1], URLS[2]]


def counter() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"key-{n}"


def test_a_write_keeps_one_idempotency_key_for_all_its_attempts() -> None:
    keys = counter()
    call = Call(URLS, "POST", FAR, new_key=lambda: next(keys))
    sent = [dict(call.headers)]
    for outcome in (request_error(httpx.ReadTimeout), problem(504), unavailable()):
        assert isinstance(call.decide(outcome, now=0.0), Wait)
        sent.append(dict(call.headers))
    assert sent == [{"Idempotency-Key": "key-1"}] * 4
    assert next(keys) == "key-2"  # drawn once


def test_a_given_key_is_used_and_a_read_carries_none() -> None:
    assert Call(URLS, "DELETE", FAR, idempotency_key="mine").headers == {"Idempotency-Key": "mine"}
    assert Call(URLS, "GET", FAR).headers == {}
    a, b = Call(URLS, "PUT", FAR), Call(URLS, "PUT", FAR)
    assert a.headers["Idempotency-Key"] != b.headers["Idempotency-Key"]  # one per write, not per client
