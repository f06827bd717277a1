"""What every command shares: the ``Result`` it returns, the checks of names and endpoints, the limits that bound
one request, and the lookups that answer a precise 404.

The contract of every command (``metadata_log.commands``): read the image, validate the request with an error
that names its field, and return the records that carry it out plus the reply. No command mutates anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import InvalidRequest, NotFound
from ..image import ClusterImage, InvalidRecord, MetadataImage, TopicImage, apply
from ..records import RANGES_VERSION, Record

MAX_PARTITIONS_PER_REQUEST: Final = 100_000
"""Most logical partitions one request may create (keeps one Raft command a few MB at most)."""

MAX_PARTITIONS_PER_TOPIC: Final = 1_000_000
"""Most logical partitions one topic may have; removed ones count, as their ids are never reused."""

MAX_REASON_CHARS: Final = 500
MAX_NAME_CHARS: Final = 249  # Kafka's topic name limit, applied to every name
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9._-]+$")
_ENDPOINT_RE: Final = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


@dataclass(frozen=True, slots=True)
class Result:
    """What a command returns: the records to propose (empty: nothing to change) and the reply to send once
    they are committed."""

    records: tuple[Record, ...]
    reply: dict[str, Any] = field(default_factory=dict)


def check_name(value: Any, field_name: str) -> str:
    """A cluster, region or topic name: 1-249 of ``[A-Za-z0-9._-]`` (Kafka's rule), not '.' or '..'."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest(field_name, f"{field_name} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidRequest(field_name, f"{field_name} is longer than {MAX_NAME_CHARS} characters")
    if not _NAME_RE.match(value) or value in (".", ".."):
        raise InvalidRequest(field_name, f"{field_name} {value!r} may only contain letters, digits, '.', '_', '-'")
    return value


def check_bootstrap(value: Any, field_name: str = "bootstrap_servers") -> str:
    """A comma-separated list of host:port endpoints."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(field_name, f"{field_name} must be a non-empty 'host:port[,host:port...]' list")
    for endpoint in value.split(","):
        endpoint = endpoint.strip()
        if not _ENDPOINT_RE.match(endpoint) or not 0 < int(endpoint.rsplit(":", 1)[1]) < 65536:
            raise InvalidRequest(field_name, f"{endpoint!r} in {field_name} is not host:port")
    return value


def check_count(value: Any, field_name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(field_name, f"{field_name} must be a positive integer")
    if value > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(field_name, f"{field_name} must be at most {MAX_PARTITIONS_PER_REQUEST}")


def writes_ranges(image: MetadataImage) -> bool:
    """Whether commands write range records (``records.RANGES_VERSION``), once every voter reads them."""
    return image.metadata_version >= RANGES_VERSION


def registered_cluster(image: MetadataImage, cluster_id: str) -> ClusterImage:
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} is not registered")
    return cluster


def existing_topic(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topics.get(name)
    if topic is None:
        raise NotFound(f"topic {name!r} does not exist")
    return topic


def apply_checked(image: MetadataImage, records: Sequence[Record]) -> MetadataImage:
    """The image after ``records``; a record that does not apply is a bug in the command itself."""
    try:
        return apply(image, records)
    except InvalidRecord as e:  # pragma: no cover - commands validate before producing records
        raise AssertionError(f"command produced a record that does not apply: {e}") from e
