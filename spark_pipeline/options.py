"""The options of the ``kfed`` Spark source, parsed and checked before any task runs.

They mirror Spark's built-in Kafka source where they apply (``subscribe``, ``startingOffsets``,
``endingOffsets``, ``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``,
``kafka.*`` passed to the consumers), with ``kfed.controllers`` instead of ``kafka.bootstrap.servers`` and
``metadataOffset`` to resolve the partitions as of one metadata log offset. Offsets in JSON are the
offsets of each logical partition's physical partition, keyed by logical topic and logical partition:
``{"U_TopicA": {"0": 23, "4": -2}}`` (-2 = earliest, -1 = latest, as in Spark).

Pure: no Spark, no network. Every problem is a ``SourceOptionError`` naming the option.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from metadata_client.access import CA_FILE, NO_ACCESS, Access, AccessError
from metadata_client.retry import controller_urls
from metadata_log.errors import InvalidSetting

EARLIEST: Final = -2
LATEST: Final = -1
DEFAULT_MAX_OFFSETS_PER_TASK: Final = 1_000_000
"""A logical partition's range is split into tasks of at most this many offsets (``kfed.maxOffsetsPerTask``)."""

Mode = Literal["batch", "stream", "any"]
"""``any``: the checks that do not depend on the kind of query (Spark asks for the schema before it says)."""
OffsetSpec = Literal["earliest", "latest"] | Mapping[str, Mapping[int, int]]
"""``earliest``, ``latest``, or per logical topic: logical partition -> physical offset (or -2 / -1)."""

_KNOWN: Final = frozenset(
    {
        "kfed.controllers",
        "subscribe",
        "startingoffsets",
        "endingoffsets",
        "maxoffsetspertrigger",
        "minpartitions",
        "failondataloss",
        "includeheaders",
        "metadataoffset",
        "kfed.maxoffsetspertask",
        "kfed.endoffsets",
        "kfed.timeoutms",
        "kfed.token.file",
        "kfed.ssl.ca.location",
        "path",  # Spark passes load(path) as an option; refused below with a reason
    }
)
_FORBIDDEN_KAFKA: Final = {
    "kafka.bootstrap.servers": "each physical cluster's bootstrap servers come from the metadata log",
    "kafka.group.id": "the source reads with assign() and commits nothing; its group id is fixed",
    "kafka.enable.auto.commit": "the source commits nothing: Spark's checkpoint holds the offsets",
    "kafka.enable.partition.eof": "the source needs partition EOF events to stop at the end of a range",
}


class SourceOptionError(InvalidSetting, ValueError):
    """An option of the ``kfed`` source is missing, unknown or malformed; ``option`` names it."""

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"kfed source option '{option}': {detail}", option=option)
        self.option = option


@dataclass(frozen=True, slots=True)
class SourceOptions:
    controllers: tuple[str, ...]
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_offsets_per_task: int = DEFAULT_MAX_OFFSETS_PER_TASK
    fail_on_data_loss: bool = True
    include_headers: bool = False
    metadata_offset: int | None = None
    end_offsets_from: Literal["auto", "fetch", "list"] = "auto"
    timeout_ms: int = 10_000
    kafka: Mapping[str, str] = field(default_factory=dict)
    access: Access = NO_ACCESS  # token and CA for the controllers


def parse_options(options: Mapping[str, str], mode: Mode) -> SourceOptions:
    """Check every option for a batch (``spark.read``) or a streaming (``spark.readStream``) query."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    for key in opts:
        if key in _FORBIDDEN_KAFKA:
            raise SourceOptionError(key, f"must not be set: {_FORBIDDEN_KAFKA[key]}")
        if key not in _KNOWN and not key.startswith("kafka."):
            raise SourceOptionError(key, f"unknown option; known: {', '.join(sorted(_KNOWN - {'path'}))}, kafka.*")
    if "path" in opts:
        raise SourceOptionError("path", "the kfed source takes no path: name the topics with 'subscribe'")
    raw_controllers = opts.get("kfed.controllers", "")
    if not raw_controllers.strip():
        raise SourceOptionError("kfed.controllers", "required: the controller URLs, e.g. http://127.0.0.1:8001")
    controllers = tuple(controller_urls(raw_controllers))
    for url in controllers:
        if not url.startswith(("http://", "https://")):
            raise SourceOptionError("kfed.controllers", f"{url!r} is not an http(s) URL")
    topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    if not topics:
        raise SourceOptionError("subscribe", "required: one or more logical topics, comma-separated")
    if len(set(topics)) != len(topics):
        raise SourceOptionError("subscribe", "a topic is named twice")

    starting = _offset_spec(opts, "startingOffsets", "earliest" if mode == "batch" else "latest", topics)
    if mode == "batch" and _has_latest(starting):
        raise SourceOptionError("startingOffsets", "latest (or -1) is not allowed for a batch query")
    if mode != "stream":
        ending = _offset_spec(opts, "endingOffsets", "latest", topics)
        if mode == "batch" and _has_earliest(ending):
            raise SourceOptionError("endingOffsets", "earliest (or -2) is not allowed for a batch query")
    else:
        if "endingoffsets" in opts:
            raise SourceOptionError("endingOffsets", "is for batch queries; a stream reads until it is stopped")
        ending = "latest"
    if isinstance(starting, Mapping) and isinstance(ending, Mapping):
        for topic, parts in starting.items():
            for p, start in parts.items():
                end = ending.get(topic, {}).get(p)
                if start >= 0 and end is not None and end >= 0 and end < start:
                    raise SourceOptionError("endingOffsets", f"{topic}/{p} ends at {end}, before its start {start}")

    max_per_trigger = _positive(opts, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and mode == "batch":
        raise SourceOptionError("maxOffsetsPerTrigger", "is for streaming queries")
    metadata_offset = _int(opts, "metadataOffset", minimum=0)
    if metadata_offset is not None and mode == "stream":
        raise SourceOptionError("metadataOffset", "is for batch queries: a stream follows the log as it grows")
    end_from = opts.get("kfed.endoffsets", "auto").strip().lower()
    if end_from not in ("auto", "fetch", "list"):
        raise SourceOptionError(
            "kfed.endOffsets",
            "must be 'auto' (ListOffsets, or fetch on Tansu), 'fetch' (works on every broker) or 'list' (ListOffsets)",
        )
    kafka = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    try:
        access = Access.from_files(opts.get("kfed.token.file"), opts.get("kfed.ssl.ca.location"))
    except AccessError as e:
        option = "kfed.ssl.ca.location" if e.what == CA_FILE else "kfed.token.file"
        raise SourceOptionError(option, e.detail) from None
    return SourceOptions(
        controllers=controllers,
        topics=topics,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive(opts, "minPartitions"),
        max_offsets_per_task=_positive(opts, "kfed.maxOffsetsPerTask") or DEFAULT_MAX_OFFSETS_PER_TASK,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        metadata_offset=metadata_offset,
        end_offsets_from="list" if end_from == "list" else "fetch" if end_from == "fetch" else "auto",
        timeout_ms=_positive(opts, "kfed.timeoutMs") or 10_000,
        kafka=kafka,
        access=access,
    )


def _offset_spec(opts: Mapping[str, str], name: str, default: str, topics: tuple[str, ...]) -> OffsetSpec:
    text = opts.get(name.lower(), default).strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        doc = json.loads(text)
    except ValueError:
        raise SourceOptionError(name, f'must be earliest, latest or JSON like {{"{topics[0]}": {{"0": 23}}}}') from None
    if not isinstance(doc, dict) or not doc:
        raise SourceOptionError(name, "JSON must be an object: logical topic -> {logical partition: offset}")
    spec: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if topic not in topics:
            raise SourceOptionError(name, f"topic {topic!r} is not subscribed ({', '.join(topics)})")
        if not isinstance(parts, dict):
            raise SourceOptionError(name, f"{topic}: must map logical partitions to offsets")
        spec[topic] = {}
        for p, offset in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise SourceOptionError(name, f"{topic}: partition {p!r} is not a non-negative integer")
            if type(offset) is not int or offset < EARLIEST:
                raise SourceOptionError(name, f"{topic}/{p}: offset {offset!r} must be >= 0, -2 (earliest) or -1")
            spec[topic][int(p)] = offset
    return spec


def _has_latest(spec: OffsetSpec) -> bool:
    if isinstance(spec, str):
        return spec == "latest"
    return any(o == LATEST for parts in spec.values() for o in parts.values())


def _has_earliest(spec: OffsetSpec) -> bool:
    if isinstance(spec, str):
        return spec == "earliest"
    return any(o == EARLIEST for parts in spec.values() for o in parts.values())


def _int(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = opts.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise SourceOptionError(name, f"{text!r} is not an integer") from None
    if value < minimum:
        raise SourceOptionError(name, f"must be >= {minimum}, got {value}")
    return value


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    return _int(opts, name, minimum=1)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise SourceOptionError(name, f"must be true or false, got {text!r}")
