"""What a node asks the other voters: the leader's answer to a request only the leader serves, and a
voter's own status (``GET /v1/node``). The HTTP layer and the service reach other nodes only through
``Peers``, which the app receives (``build_app(peers=…)``) and routes get as a dependency, so tests can
put a fake in its place."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import httpx
from starlette.responses import Response

from metadata_log.errors import OutcomeUnknown, Unavailable

from ..service import ControllerService

if TYPE_CHECKING:
    import aiohttp

FORWARDED_HEADER: Final = "X-Kfed-Forwarded-By"  # on a request a follower forwarded to the leader
OFFSET_HEADER: Final = "X-Kfed-Offset"  # on a committed write's answer: the log offset of its last record
APPLIED_WAIT_S: Final = 2.0
"""At most this long a follower holds a forwarded write's answer until it has applied the write itself."""
STATUS_TIMEOUT_S: Final = 0.5
"""How long ``GET /v1/quorum`` waits for each other voter's status before it calls that voter unreachable."""


class LeaderForwarder:
    """Sends a request a follower cannot answer (a write, a lease, a group call) on to the leader, and its
    answer back.

    Through aiohttp, not httpx: httpcore's pool checks every connection (a ``poll()`` on its socket) for
    every request (``_assign_requests_to_connections``; encode/httpcore#1035 and #924 are open), so with the
    dozens of writes a busy follower has in flight, forwarding a write cost the follower more CPU than the
    leader spent committing it."""

    PASSED_ON: Final = ("content-type", "accept", "idempotency-key", "authorization")
    PASSED_BACK: Final = ("content-type", "retry-after", "idempotent-replayed", OFFSET_HEADER.lower())
    KEEPALIVE_S: Final = 4.0
    """How long an idle connection to the leader is reused: under uvicorn's 5 s, so the leader never closes
    one just as a request goes out on it."""
    MAX_CONNECTIONS: Final = 256

    def __init__(self, service: ControllerService, timeout_s: float, verify: ssl.SSLContext | bool = True) -> None:
        self.service = service
        self.timeout_s = timeout_s
        self.verify = verify
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp binds it to the running loop. aiohttp is imported then
        too (~0.2 s): a node that never forwards, like the leader, or a follower catching up after a
        restart, does not pay for it at start."""
        import aiohttp

        if self._session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.MAX_CONNECTIONS, keepalive_timeout=self.KEEPALIVE_S, ssl=self.verify
                ),
                # sock_connect, not connect: aiohttp's connect also bounds the wait for a free connection
                # of the pool, which a burst of slow commits can make longer than a second
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=1.0),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),  # pass on only ours
            )
            # aiohttp sends a PUT or DELETE again when the connection drops before the answer (RFC 9112
            # allows it for idempotent methods). A write the leader committed would then get the answer of
            # its repeat (a 409 or a 404) instead of "outcome unknown". aiohttp's own test client turns the
            # retry off through this attribute; there is no public switch (tested).
            session._retry_connection = False
            self._session = session
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __call__(
        self, method: str, raw_path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> Response:
        """``raw_path``: as received, still percent-encoded; ``headers``: looked up by lower-case name."""
        if headers.get(FORWARDED_HEADER.lower()):
            raise Unavailable("leadership moved while the write was forwarded", retry_after_s=0.2)
        leader = self.service.leader()
        if leader is None:
            raise Unavailable("no leader elected yet", retry_after_s=1.0)
        onward = {name: value for name in self.PASSED_ON if (value := headers.get(name)) is not None}
        onward[FORWARDED_HEADER] = str(self.service.node_id)
        url = leader.http + raw_path + (f"?{query}" if query else "")
        client = self._client()
        import aiohttp  # imported by _client()
        import yarl

        try:
            async with client.request(method, yarl.URL(url, encoded=True), data=body, headers=onward) as upstream:
                content = await upstream.read()
                back = {name: value for name in self.PASSED_BACK if (value := upstream.headers.get(name)) is not None}
                status = upstream.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:  # nothing was sent
            raise Unavailable(f"leader {leader.id} unreachable: {type(e).__name__}", retry_after_s=0.5) from None
        except (aiohttp.ClientError, TimeoutError) as e:  # sent, then no answer: it may have committed
            raise OutcomeUnknown(
                f"the leader did not answer ({type(e).__name__}); retry with the same Idempotency-Key"
            ) from None
        offset = back.get(OFFSET_HEADER.lower(), "")
        if status < 300 and offset.isdigit():
            await self._applied(int(offset))
        return Response(content, status_code=status, headers=back)

    async def _applied(self, offset: int) -> None:
        """Until this node has applied a write it passed on, so that a client reading here next sees it, as
        on the leader (a CLI's ``topic create`` then ``topic status``, both on the first URL). The write is
        committed either way: past ``APPLIED_WAIT_S`` (a follower far behind) the answer goes as it is."""
        read_model = self.service.read_model
        if read_model.image.offset < offset:
            await read_model.wait_beyond(offset, APPLIED_WAIT_S)


class Peers:
    """This node's access to the other voters. ``forward`` passes a request on to the leader (see
    ``LeaderForwarder``); ``node_status`` asks a voter for its own status. ``token``: the node's own
    token for its status calls (a forwarded request carries the caller's)."""

    def __init__(
        self, service: ControllerService, verify: ssl.SSLContext | bool = True, token: str | None = None
    ) -> None:
        timeout_s = service.commit_timeout_s + 2  # the leader's commit timeout, and the way there and back
        self.forward = LeaderForwarder(service, timeout_s, verify)
        self._status = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=1.0), verify=verify)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def node_status(self, voter_http: str, timeout_s: float = STATUS_TIMEOUT_S) -> dict[str, Any] | None:
        """A voter's ``/v1/node``; None when it does not answer it."""
        try:
            r = await self._status.get(voter_http + "/v1/node", timeout=timeout_s, headers=self._headers)
            answer = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    async def aclose(self) -> None:
        try:
            await self._status.aclose()
        finally:
            await self.forward.aclose()
