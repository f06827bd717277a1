"""The log follower's tail loop waits as the clients do (``retry.backoff_s``): a controller's ``Retry-After``
within the one cap (``retry.WAIT_MAX_S``), else the back-off."""

from __future__ import annotations

import httpx
import orjson
import pytest

from metadata_client.follower import LogFollower
from metadata_client.retry import BACKOFF_MIN_S, WAIT_MAX_S


class Stop:
    """A stand-in for the follower's stop event that records each wait and stops after the first."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return bool(self.waits)

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return True


@pytest.mark.parametrize(("retry_after", "wait_s"), [("1", 1.0), ("30", WAIT_MAX_S), (None, BACKOFF_MIN_S)])
def test_the_log_follower_waits_what_retry_after_asks_within_the_cap(retry_after: str | None, wait_s: float) -> None:
    def no_leader(request: httpx.Request) -> httpx.Response:
        body = {"type": "about:blank", "title": "t", "status": 503, "detail": "not ready"}
        headers = {"content-type": "application/problem+json", **({"retry-after": retry_after} if retry_after else {})}
        return httpx.Response(503, content=orjson.dumps(body), headers=headers)

    with httpx.Client(transport=httpx.MockTransport(no_leader)) as http:
        follower = LogFollower(["http://a:1"], client=http)
        stop = follower._stopping = Stop()
        follower._run()
    assert stop.waits == [wait_s]
