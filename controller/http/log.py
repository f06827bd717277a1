"""The metadata log by offset: pages with long-poll (``/v1/log``), Server-Sent Events (``/v1/log/stream``)
and the snapshot a reader starts from (``/v1/snapshot``). Every node serves them from its own read model."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Annotated, Final, Literal

import orjson
from fastapi import Depends, Header, Query, Request
from starlette.responses import Response, StreamingResponse

from metadata_log.codec import pack
from metadata_log.errors import Gone, InvalidRequest, TooManyRequests, Unavailable

from ..readmodel import ReadModel
from .bodies import INT64_MAX
from .deps import Service
from .encoding import JSON, MSGPACK, wants_msgpack
from .routing import Router

LOG_LIMIT_DEFAULT: Final = 1000
LOG_LIMIT_MAX: Final = 10_000
WAIT_MS_MAX: Final = 30_000
MIN_OFFSET_WAIT_S: Final = 5.0
SSE_KEEPALIVE_S: Final = 15.0
SSE_MAX_SUBSCRIBERS: Final = 2000
SSE_MAX_PER_CLIENT: Final = 64  # open streams per client address; a dashboard or a tailer needs one

router = Router(prefix="/v1", tags=["log"])


class LogStreams:
    """The node's open log streams, bounded in all and per client address."""

    def __init__(self) -> None:
        self.open = 0
        self._by_client: collections.Counter[str] = collections.Counter()

    def admit(self, client: str) -> None:
        if self.open >= SSE_MAX_SUBSCRIBERS:
            raise Unavailable(f"this node serves at most {SSE_MAX_SUBSCRIBERS} streams", retry_after_s=5)
        if self._by_client[client] >= SSE_MAX_PER_CLIENT:
            raise TooManyRequests(
                f"{client} has {SSE_MAX_PER_CLIENT} log streams open on this node already",
                retry_after_s=5,
                limit=SSE_MAX_PER_CLIENT,
            )
        self.open += 1
        self._by_client[client] += 1

    def release(self, client: str) -> None:
        self.open -= 1
        self._by_client[client] -= 1
        if not self._by_client[client]:
            del self._by_client[client]


async def get_streams(request: Request) -> LogStreams:
    streams: LogStreams = request.app.state.streams
    return streams


Streams = Annotated[LogStreams, Depends(get_streams)]


@router.get("/log", summary="Records from an offset (long-poll with wait_ms); 410 below the retention window")
async def read_log(
    request: Request,
    service: Service,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX, description="First offset wanted.")],
    limit: Annotated[int, Query(ge=1, le=LOG_LIMIT_MAX, description="Most records returned.")] = LOG_LIMIT_DEFAULT,
    wait_ms: Annotated[int, Query(ge=0, le=WAIT_MS_MAX, description="Wait this long when there is nothing yet.")] = 0,
) -> Response:
    rm = service.read_model
    rm.read(offset, 1)  # 410 now, before waiting, when below the window
    if wait_ms and rm.high_watermark <= offset:
        await rm.wait_beyond(offset, wait_ms / 1000)
    page = rm.read(offset, limit)
    positions = {
        "next_offset": page.next_offset,
        "high_watermark": page.high_watermark,
        "log_start_offset": page.log_start_offset,
    }
    if wants_msgpack(request):
        return Response(pack({"records": [e.as_dict() for e in page.entries], **positions}), media_type=MSGPACK)
    # each record's JSON is encoded once, when it is applied: the page is joined, not encoded again
    body = b'{"records":[' + b",".join(e.json for e in page.entries) + b"]," + orjson.dumps(positions)[1:]
    return Response(body, media_type=JSON)


@router.get("/log/stream", summary="Server-Sent Events, one per record, id = offset; resume with Last-Event-ID")
async def stream_log(
    request: Request,
    service: Service,
    streams: Streams,
    offset: Annotated[
        int | None, Query(ge=0, le=INT64_MAX, description="First offset wanted (default: the next one).")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    rm = service.read_model
    if last_event_id is not None:
        text = last_event_id.strip()
        if not text.lstrip("-").isdigit() or len(text) > 19 or not -1 <= int(text) < INT64_MAX:
            raise InvalidRequest("Last-Event-ID", "Last-Event-ID must be the offset of the last event seen")
        start = int(last_event_id) + 1
    else:
        start = offset if offset is not None else rm.high_watermark
    rm.read(start, 1)  # 410 before the stream starts
    client = request.client.host if request.client else "?"
    streams.admit(client)
    return StreamingResponse(
        _events(rm, start, streams, client),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(rm: ReadModel, position: int, streams: LogStreams, client: str) -> AsyncIterator[bytes]:
    try:
        yield b"retry: 1000\n\n"
        while True:
            try:
                page = rm.read(position, LOG_LIMIT_DEFAULT)
            except Gone as e:  # the reader fell below the window: tell it, then end
                yield b"event: gone\ndata: " + orjson.dumps({"detail": e.detail, **e.extra}) + b"\n\n"
                return
            if page.entries:
                yield b"".join(b"id: %d\nevent: record\ndata: %s\n\n" % (e.offset, e.json) for e in page.entries)
                position = page.next_offset
                continue
            if not await rm.wait_beyond(position, SSE_KEEPALIVE_S):
                yield b": keepalive\n\n"
    finally:
        streams.release(client)


@router.get(
    "/snapshot",
    summary="The image at offset S written as records; continue reading the log at S+1. S is recent, "
    "not always the newest: an encoded snapshot is reused for a while (at least min_offset when given)",
)
async def snapshot(
    request: Request,
    service: Service,
    min_offset: Annotated[
        int | None, Query(ge=-1, le=INT64_MAX, description="A snapshot at this offset or later (waits for it).")
    ] = None,
    layout: Annotated[
        Literal["records", "runs"],
        Query(
            description="msgpack only: 'runs' writes runs of one record type as columns, "
            '{"offset", "runs": [[n, type, version, *columns] or a record row, ...]}'
        ),
    ] = "records",
) -> Response:
    if min_offset is not None:
        await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
    # encodings are built once per snapshot, off the event loop
    snap = service.read_model.snapshot(-1 if min_offset is None else min_offset)
    if wants_msgpack(request):
        encoded = (lambda: snap.runs) if layout == "runs" else (lambda: snap.msgpack)
        return Response(await asyncio.to_thread(encoded), media_type=MSGPACK)
    return Response(await asyncio.to_thread(lambda: snap.json), media_type=JSON)
