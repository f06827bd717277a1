"""Merged metadata (clusters and logical topics) at the node's applied offset, with read-your-writes
(``min_offset``)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Final

import orjson
from fastapi import Depends, Query, Request
from starlette.responses import Response

from metadata_log.codec import pack
from metadata_log.errors import InvalidRequest, NotFound
from metadata_log.image import MetadataImage
from metadata_log.views import MAX_PARTITIONS_PAGE, MAX_TOPICS_PAGE, PARTITIONS_PAGE, TOPICS_PAGE, metadata_view

from .bodies import INT64_MAX
from .deps import Service
from .encoding import JSON, MSGPACK, respond, wants_msgpack
from .log import MIN_OFFSET_WAIT_S
from .routing import Router

router = Router(prefix="/v1", tags=["metadata"])


class RenderedMetadata:
    """The full merged metadata, encoded once per image offset and encoding. Big images are rendered in
    a worker thread so that tailers on the event loop are not held up (1M partitions take seconds)."""

    THREAD_ABOVE_PARTITIONS: Final = 20_000

    def __init__(self) -> None:
        self._cache: dict[str, tuple[int, bytes]] = {}

    async def get(self, image: MetadataImage, encoding: str) -> bytes:
        cached = self._cache.get(encoding)
        if cached is not None and cached[0] == image.offset:
            return cached[1]

        def render() -> bytes:
            view = metadata_view(image)
            return pack(view) if encoding == MSGPACK else orjson.dumps(view)

        if image.partition_count() > self.THREAD_ABOVE_PARTITIONS:
            body = await asyncio.to_thread(render)
        else:
            body = render()
        self._cache[encoding] = (image.offset, body)
        return body


async def get_rendered(request: Request) -> RenderedMetadata:
    rendered: RenderedMetadata = request.app.state.rendered_metadata
    return rendered


@router.get(
    "/metadata",
    summary="Merged metadata (clusters, and logical topics with a page of partitions each) at this node's offset",
)
async def metadata(
    request: Request,
    service: Service,
    rendered: Annotated[RenderedMetadata, Depends(get_rendered)],
    topic: Annotated[str | None, Query(description="Only this logical topic.")] = None,
    min_offset: Annotated[
        int | None, Query(ge=-1, le=INT64_MAX, description="Wait until this offset is applied.")
    ] = None,
    first_partition: Annotated[
        int, Query(ge=0, le=INT64_MAX, description="With topic: the first partition of the page listed.")
    ] = 0,
    first_topic: Annotated[
        str | None, Query(max_length=249, description="The first topic (by name) of the page of topics listed.")
    ] = None,
    topic_limit: Annotated[int, Query(ge=1, le=MAX_TOPICS_PAGE, description="Most topics listed.")] = TOPICS_PAGE,
    partition_limit: Annotated[
        int, Query(ge=0, le=MAX_PARTITIONS_PAGE, description="Most partitions listed per topic (0: counts only).")
    ] = PARTITIONS_PAGE,
) -> Response:
    image = await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
    if topic is not None:
        if topic not in image.topics:
            raise NotFound(f"topic {topic!r} does not exist", offset=image.offset)
        return respond(request, metadata_view(image, topic, first_partition, partition_limit=partition_limit))
    if first_partition:
        raise InvalidRequest("first_partition", "first_partition pages one topic's partitions: give topic too")
    if first_topic is not None or topic_limit != TOPICS_PAGE or partition_limit != PARTITIONS_PAGE:
        page = metadata_view(
            image, first_topic=first_topic or "", topic_limit=topic_limit, partition_limit=partition_limit
        )
        return respond(request, page)
    encoding = MSGPACK if wants_msgpack(request) else JSON
    return Response(await rendered.get(image, encoding), media_type=encoding)
