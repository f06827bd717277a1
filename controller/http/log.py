"""The metadata log by offset: pages with long-poll (``/v1/log``), Server-Sent Events (``/v1/log/stream``)
and the snapshot a reader starts from (``/v1/snapshot``). Every node serves them from its own read model."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Final, Literal, NamedTuple

import orjson
from fastapi import Depends, Header, Query, Request
from starlette.responses import Response, StreamingResponse

from metadata_log.codec import pack
from metadata_log.errors import Conflict, Gone, InvalidRequest, TooManyRequests, Unavailable
from metadata_log.image import MetadataImage
from metadata_log.records import LATEST_METADATA_VERSION, version_to_read
from metadata_log.selection import MAX_SELECTED_CLUSTERS, MAX_SELECTED_TOPICS, MAX_SELECTION_CHARS, Selection
from metadata_log.snapshot import Layout, pack_body

from ..readmodel import Entry, ReadModel
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
CURRENT_AGE_MAX_S: Final = 3600.0
"""Past this, a node's ``current_ms_ago`` is null: it has not known its log current for too long to say."""
READER_VERSION_DEFAULT: Final = 3
"""The metadata version a reader that does not say which it reads is taken to read: the contract before range
records (metadata version 4), which such a reader does not know."""

TopicsSelected = Annotated[
    str | None,
    Query(
        max_length=MAX_SELECTION_CHARS,
        description="Comma-separated logical topics: only their records, their physical topics' leaders and the "
        f"federation-wide kinds (metadata_log/selection.py), up to {MAX_SELECTED_TOPICS} topics. next_offset "
        "still moves past what is left out.",
    ),
]

ClustersSelected = Annotated[
    str | None,
    Query(
        max_length=MAX_SELECTION_CHARS,
        description="Comma-separated cluster ids: the records of every topic placed on them, their leader "
        f"reports, every topic deletion (with topics=, those topics too), up to {MAX_SELECTED_CLUSTERS} clusters.",
    ),
]


class Chosen(NamedTuple):
    """What a follower selected: ``topics=`` and ``clusters=`` as names."""

    topics: list[str]
    clusters: list[str]

    def selection(self, image: MetadataImage) -> Selection:
        return Selection.of(self.topics, image, self.clusters)


def selected(topics: str | None, clusters: str | None = None) -> Chosen | None:
    """The ``topics=`` and ``clusters=`` parameters' names (None: every record; none: the federation-wide kinds
    only)."""
    if topics is None and clusters is None:
        return None
    names = [name for name in (topics or "").split(",") if name]
    if len(names) > MAX_SELECTED_TOPICS:
        raise InvalidRequest("topics", f"topics names up to {MAX_SELECTED_TOPICS} comma-separated logical topics")
    ids = [cid for cid in (clusters or "").split(",") if cid]
    if len(ids) > MAX_SELECTED_CLUSTERS:
        raise InvalidRequest("clusters", f"clusters names up to {MAX_SELECTED_CLUSTERS} comma-separated clusters")
    return Chosen(names, ids)


def _sent(entries: Sequence[Entry], chosen: Chosen | None, image: MetadataImage) -> Sequence[Entry]:
    """The ``entries`` a follower of ``chosen`` gets, its topics placed as ``image`` says (the newest: placements
    only grow while the reader waits)."""
    if chosen is None:
        return entries
    selection = chosen.selection(image)
    return [e for e in entries if selection.wants(e.record)]


ReaderVersion = Annotated[
    int,
    Query(
        ge=1,
        le=LATEST_METADATA_VERSION,
        description="The newest metadata version whose records this reader knows (records.FIRST_VERSION): "
        f"records written from a newer one are not sent to it (409). Default {READER_VERSION_DEFAULT}; "
        f"this node writes up to {LATEST_METADATA_VERSION}.",
    ),
]

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
    metadata_version: ReaderVersion = READER_VERSION_DEFAULT,
    topics: TopicsSelected = None,
    clusters: ClustersSelected = None,
) -> Response:
    rm = service.read_model
    chosen = selected(topics, clusters)
    rm.read(offset, 1)  # 410 now, before waiting, when below the window
    if wait_ms and rm.high_watermark <= offset:
        await rm.wait_beyond(offset, wait_ms / 1000)
    page = rm.read(offset, limit)
    entries = _readable(page.entries, metadata_version)
    next_offset = entries[-1].offset + 1 if len(entries) < len(page.entries) else page.next_offset
    entries = _sent(entries, chosen, rm.image)
    age_s = service.raft.current_age_s()
    positions = {
        "next_offset": next_offset,
        "high_watermark": page.high_watermark,
        "log_start_offset": page.log_start_offset,
        # how long before answering this node last knew its log current (null: it does not know)
        "current_ms_ago": int(age_s * 1000) if age_s < CURRENT_AGE_MAX_S else None,
    }
    if wants_msgpack(request):
        return Response(pack({"records": [e.as_dict() for e in entries], **positions}), media_type=MSGPACK)
    # each record's JSON is encoded once, when it is applied: the page is joined, not encoded again
    body = b'{"records":[' + b",".join(e.json for e in entries) + b"]," + orjson.dumps(positions)[1:]
    return Response(body, media_type=JSON)


@router.get(
    "/log/stream",
    summary="Server-Sent Events, one per record (of the topics= selected), id = offset; resume with Last-Event-ID",
)
async def stream_log(
    request: Request,
    service: Service,
    streams: Streams,
    offset: Annotated[
        int | None, Query(ge=0, le=INT64_MAX, description="First offset wanted (default: the next one).")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    metadata_version: ReaderVersion = READER_VERSION_DEFAULT,
    topics: TopicsSelected = None,
    clusters: ClustersSelected = None,
) -> Response:
    rm = service.read_model
    chosen = selected(topics, clusters)  # a bad selection is refused before the stream starts
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
        _events(rm, start, streams, client, metadata_version, chosen),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(
    rm: ReadModel, position: int, streams: LogStreams, client: str, reader_version: int, chosen: Chosen | None
) -> AsyncIterator[bytes]:
    try:
        yield b"retry: 1000\n\n"
        while True:
            try:
                page = rm.read(position, LOG_LIMIT_DEFAULT)
                entries = _readable(page.entries, reader_version) if page.entries else page.entries
            except (Gone, Conflict) as e:  # below the window, or a record it cannot read: tell it, then end
                event = b"gone" if isinstance(e, Gone) else b"newer"
                yield b"event: " + event + b"\ndata: " + orjson.dumps({"detail": e.detail, **e.extra}) + b"\n\n"
                return
            if entries:
                position = entries[-1].offset + 1
                if sent := _sent(entries, chosen, rm.image):
                    yield b"".join(b"id: %d\nevent: record\ndata: %s\n\n" % (e.offset, e.json) for e in sent)
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
    metadata_version: ReaderVersion = READER_VERSION_DEFAULT,
    topics: TopicsSelected = None,
    clusters: ClustersSelected = None,
) -> Response:
    if min_offset is not None:
        await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
    # encodings are built once per snapshot, off the event loop
    snap = service.read_model.snapshot(-1 if min_offset is None else min_offset)
    if snap.image.metadata_version > metadata_version:
        raise _newer(snap.image.metadata_version, metadata_version, f"the snapshot at offset {snap.image.offset}")
    chosen = selected(topics, clusters)
    if chosen is not None:  # a follower's own: encoded for it, of the size of its topics
        if not wants_msgpack(request):
            raise InvalidRequest(
                "topics", "a snapshot of some topics is served as msgpack (Accept: application/msgpack)"
            )
        image = chosen.selection(snap.image).image(snap.image)
        written: Layout = "runs" if layout == "runs" else "rows"
        return Response(await asyncio.to_thread(pack_body, image, written), media_type=MSGPACK)
    if wants_msgpack(request):
        encoded = (lambda: snap.runs) if layout == "runs" else (lambda: snap.msgpack)
        return Response(await asyncio.to_thread(encoded), media_type=MSGPACK)
    return Response(await asyncio.to_thread(lambda: snap.json), media_type=JSON)


def _readable(entries: Sequence[Entry], reader_version: int) -> Sequence[Entry]:
    """The first ``entries`` a reader of ``reader_version`` can replay: the page stops before a newer record, and a
    page that would start with one is refused (``Conflict`` naming ``metadata_version``)."""
    for at, entry in enumerate(entries):
        if (needed := version_to_read(entry.record)) > reader_version:
            if at == 0:
                raise _newer(needed, reader_version, f"the record at offset {entry.offset}")
            return entries[:at]
    return entries


def _newer(needed: int, reader_version: int, what: str) -> Conflict:
    return Conflict(
        f"{what} is of metadata version {needed}; this reader reads up to {reader_version}: "
        f"ask with metadata_version={needed} once it reads that version",
        field="metadata_version",
    )
