"""The metadata image a query plans with: the latest one, or the one as of a given log offset.

Both are rebuilt with the same pure ``apply`` as every other reader of the log, filtered to the job's topics.
``image_at(N)`` replays the log from offset 0 (or uses the snapshot when it is exactly at N) so a batch read
with ``metadataOffset=N`` sees the same partitions however much the federation changed since.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any, Final

import httpx

from metadata_client.access import NO_ACCESS, Access
from metadata_client.follower import MSGPACK, FollowerError, LogFollower
from metadata_client.retry import reply_error
from metadata_log.codec import unpack
from metadata_log.errors import KfedError, Unavailable
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import LATEST_METADATA_VERSION
from metadata_log.selection import fits, offset_runs, page_records
from metadata_log.snapshot import read_body

from .options import SourceOptionError

PAGE_RECORDS: Final = 5_000


class MetadataUnavailable(Unavailable):
    """No controller answered with the metadata log."""


def latest_image(
    controllers: Sequence[str],
    timeout_s: float = 10.0,
    access: Access = NO_ACCESS,
    topics: Collection[str] | None = None,
) -> MetadataImage:
    """The image at the quorum's current high watermark (snapshot, then the log after it); with ``topics``, only
    what a job of those topics needs (a filtered follow: a 10,000-partition topic's plan reads that topic)."""
    with LogFollower(controllers, wait_ms=0, timeout_s=timeout_s, access=access, topics=topics) as follower:
        return catch_up(follower)


def catch_up(follower: LogFollower) -> MetadataImage:
    """Advance a follower to the high watermark it finds, and return its image."""
    try:
        while follower.poll(0) or not follower.caught_up:  # a filtered page may apply nothing, yet move on
            pass
    except FollowerError as e:
        raise MetadataUnavailable(f"kfed source: cannot read the metadata log: {e}") from e
    return follower.image


def image_at(
    controllers: Sequence[str],
    offset: int,
    timeout_s: float = 10.0,
    access: Access = NO_ACCESS,
    topics: Collection[str] | None = None,
) -> MetadataImage:
    """The image after exactly the records ``0..offset``; ``SourceOptionError('metadataOffset')`` when the
    controllers no longer hold them (below their window) or do not have them yet (above the high watermark).
    With ``topics``, only what a job of those topics needs: the log is read filtered to them
    (``metadata_log.selection``), each record applied at its own offset, so the job's topics are exactly as a
    whole replay has them."""
    selected = ",".join(sorted(topics)) if topics is not None and fits(topics) else None
    errors = []
    with access.http_client(timeout_s) as client:
        for url in controllers:
            try:
                return _replay(client, url, offset, selected)
            except (httpx.HTTPError, KfedError, KeyError, TypeError, ValueError) as e:
                if isinstance(e, SourceOptionError):
                    raise
                errors.append(f"{url}: {type(e).__name__}: {e}")
    raise MetadataUnavailable(f"kfed source: no controller could replay the log to {offset}: {'; '.join(errors)}")


def _get(client: httpx.Client, url: str, path: str, **params: Any) -> tuple[int, Any]:
    params["metadata_version"] = LATEST_METADATA_VERSION  # the records this code reads
    params = {name: value for name, value in params.items() if value is not None}
    r = client.get(url + path, params=params, headers={"Accept": MSGPACK})
    if r.status_code not in (200, 410):
        raise reply_error(url, r)
    return r.status_code, unpack(r.content)


def _replay(client: httpx.Client, url: str, offset: int, topics: str | None) -> MetadataImage:
    """``topics``: the comma-separated selection read, or None (every record)."""
    image = EMPTY_IMAGE
    position = 0
    while image.offset < offset:
        limit = min(PAGE_RECORDS, offset - position + 1)  # never a record past ``offset``
        status, body = _get(client, url, "/v1/log", offset=position, limit=limit, topics=topics)
        if status == 410:
            _, snap = _get(client, url, "/v1/snapshot", layout="runs", topics=topics)  # rows from an older node
            if int(snap["offset"]) == offset:
                return read_body(snap, offset)
            raise SourceOptionError(
                "metadataOffset",
                f"{offset} is below what the controllers still hold (log starts at {body.get('log_start_offset')}, "
                f"snapshot at {snap['offset']}); use a newer offset or leave the option out",
            )
        high = int(body["high_watermark"])
        if offset >= high:
            raise SourceOptionError(
                "metadataOffset", f"{offset} is not in the log yet (high watermark {high}, last offset {high - 1})"
            )
        end = min(int(body["next_offset"]), offset + 1)
        if end <= position:
            raise ValueError(f"{url} moved no further than offset {position} below its high watermark {high}")
        image = _apply_at_offsets(image, body["records"], position, end)
        position = end
    return image


def _apply_at_offsets(image: MetadataImage, items: Sequence[Any], position: int, end: int) -> MetadataImage:
    """``items`` (a page's records, with the gaps a filtered page leaves) applied each at its own offset, then
    the image moved to ``end - 1``: what was left out changed nothing this reader holds."""
    for first, records in offset_runs(page_records(items, position, end)):
        image = apply(replace(image, offset=first - 1), records)
    return replace(image, offset=end - 1)
