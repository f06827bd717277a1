"""The history checker: what must hold after any schedule of faults.

``check(ops, logs, metadata)`` takes the recorded operations (see ``history.py``), every node's final log
(``GET /v1/log`` from 0, after healing) and every node's final ``GET /v1/metadata``; it returns the
anomalies found (an empty list when all holds):

- ``log-gap``: a node's offsets are not 0, 1, 2, ... ;
- ``log-diverged`` / ``log-length``: two nodes disagree on a record they both hold / do not end equal;
- ``lost-write``: an acknowledged write whose effect is not in the log at its acknowledged offset (its
  record missing, or at another offset, or the image at that offset not showing it);
- ``duplicate-write``: a write (acknowledged or unknown) whose records are in the log more than once;
- ``failed-write-applied``: a write refused with a 4xx on every attempt, yet in the log;
- ``phantom-record``: a record no write asked for;
- ``tail-order``: a tailer that saw a gap, a duplicate or an out-of-order offset;
- ``tail-mismatch``: a tailer that saw a record other than the final log's at that offset;
- ``two-leaders``: two nodes that each claimed leadership in the same term (each seen at least twice:
  a node's term and role are read separately, so one poll can catch a deposed leader's new term);
- ``log-invalid``: a record that ``apply`` refuses on the image before it;
- ``metadata-mismatch``: a ``/v1/metadata`` answer (during the run or at the end) that differs from
  ``metadata_view(apply(log[:offset+1]))``, the pure ``apply`` of the records the log holds.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metadata_log.codec import record_from_dict
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, apply
from metadata_log.views import metadata_view

from .history import record_digest

# Writes whose record names what they created or deleted, so it can be counted in the log:
# kind -> (record type, record field, write argument)
_UNIQUE: dict[str, tuple[str, str, str]] = {
    "register": ("ClusterRegistered", "cluster_id", "cluster_id"),
    "create_topic": ("TopicCreated", "name", "name"),
    "delete_topic": ("TopicDeleted", "name", "name"),
}


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Summary:
    writes: int
    acknowledged: int
    unknown: int
    failed: int
    unknown_attempts: int  # attempts that timed out, lost their connection or got a 5xx (then retried)
    tail_pages: int
    tail_records: int
    node_polls: int
    metadata_checks: int
    log_length: int


def check(
    ops: Sequence[dict[str, Any]],
    logs: Mapping[int, Sequence[dict[str, Any]]],
    metadata: Mapping[Any, dict[str, Any]],
    archive: Iterable[dict[str, Any]] = (),
    ends: Mapping[int, int] | None = None,
) -> tuple[list[Anomaly], Summary]:
    """All the checks; ``archive``: full records the tailers read (the log below every node's dump); ``ends``:
    each node's last applied offset at the end (see ``check_logs``)."""
    anomalies: list[Anomaly] = []
    anomalies += check_logs(logs, ends)
    final, incomplete = reference_log(logs, archive)
    anomalies += incomplete
    final, invalid = valid_prefix(final)
    anomalies += invalid
    images = _Images(final)
    write_anomalies, counts = check_writes(ops, final, images)
    anomalies += write_anomalies
    anomalies += check_tails(ops, final, images)
    anomalies += check_leaders(ops)
    samples = [(f"node {op['node']} at {op['ret']} s", op["body"]) for op in ops if op["op"] == "metadata"]
    samples += [(f"node {n} at the end", body) for n, body in sorted(metadata.items())]
    anomalies += check_metadata(samples, images)
    tails = [op for op in ops if op["op"] == "tail" and op["outcome"] == "ok"]
    summary = Summary(
        writes=sum(counts.values()),
        acknowledged=counts["ok"],
        unknown=counts["unknown"],
        failed=counts["failed"],
        unknown_attempts=sum(1 for op in ops if op["op"] == "write" and op["outcome"] == "unknown"),
        tail_pages=len(tails),
        tail_records=sum(len(op["records"]) for op in tails),
        node_polls=sum(1 for op in ops if op["op"] == "node"),
        metadata_checks=len(samples),
        log_length=len(final),
    )
    return anomalies, summary


def check_logs(logs: Mapping[int, Sequence[dict[str, Any]]], ends: Mapping[int, int] | None = None) -> list[Anomaly]:
    """Each node's log is gap-free from where it starts (a node restarted from a dump, or caught up through
    the leader's snapshot, serves records after it only: possibly none); over the offsets two nodes both hold
    they agree; after healing they end together. A node's end is its last applied offset when ``ends`` has it
    (a log it serves must end there too), else the last record it serves."""
    ends = ends or {}
    out = []
    for node, log in sorted(logs.items()):
        start = log[0]["offset"] if log else 0
        for i, record in enumerate(log):
            if record["offset"] != start + i:
                out.append(Anomaly("log-gap", f"node {node}: offset {record['offset']} follows {start + i - 1}"))
                break
        if log and node in ends and log[-1]["offset"] != ends[node]:
            out.append(Anomaly("log-length", f"node {node} serves a log ending at {log[-1]['offset']}, "
                               f"yet applied up to {ends[node]}"))  # fmt: skip
    by_offset = {n: {r["offset"]: r for r in log} for n, log in logs.items()}
    nodes = sorted(logs)
    for a, b in itertools.pairwise(nodes):
        for offset in sorted(by_offset[a].keys() & by_offset[b].keys()):
            if by_offset[a][offset] != by_offset[b][offset]:
                out.append(Anomaly("log-diverged", f"nodes {a} and {b} differ at offset {offset}: "
                                   f"{by_offset[a][offset]} vs {by_offset[b][offset]}"))  # fmt: skip
                break
        end_a, end_b = (ends.get(n, logs[n][-1]["offset"] if logs[n] else None) for n in (a, b))
        if end_a != end_b:
            out.append(Anomaly("log-length", f"after healing node {a} ends at offset {end_a}, node {b} at {end_b}"))
    return out


def reference_log(
    logs: Mapping[int, Sequence[dict[str, Any]]], archive: Iterable[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Anomaly]]:
    """The whole log from offset 0: the nodes' records, and below what every node still serves (nodes
    restarted from a dump serve only what follows it) the records the tailers read."""
    merged: dict[int, dict[str, Any]] = {}
    for r in archive:
        merged[r["offset"]] = r
    for log in logs.values():
        for r in log:
            merged[r["offset"]] = r
    end = max(merged, default=-1) + 1
    missing = [o for o in range(end) if o not in merged]
    if missing:
        return [merged[o] for o in range(missing[0])], [
            Anomaly(
                "log-incomplete",
                f"no node and no tailer holds offsets {missing[:10]}...; checked up to {missing[0] - 1}",
            )
        ]
    return [merged[o] for o in range(end)], []


def valid_prefix(log: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Anomaly]]:
    """The longest prefix of ``log`` that ``apply`` accepts (a committed record that does not apply means
    the nodes applied something else than their log says)."""
    records = [record_from_dict(r["type"], r["data"]) for r in log]
    try:
        apply(EMPTY_IMAGE, records)
        return list(log), []
    except InvalidRecord:
        pass
    image = EMPTY_IMAGE
    for i, record in enumerate(records):
        try:
            image = apply(image, [record])
        except InvalidRecord as e:
            return list(log[:i]), [Anomaly("log-invalid", f"offset {i} does not apply: {e}; checked up to {i - 1}")]
    return list(log), []  # pragma: no cover - the batch apply failed, so one record does


class _Images:
    """Images of the final log at any offset, by the pure ``apply`` (computed once, in order)."""

    def __init__(self, log: Sequence[dict[str, Any]]) -> None:
        self.records = [record_from_dict(r["type"], r["data"]) for r in log]
        self._at: dict[int, MetadataImage] = {-1: EMPTY_IMAGE}

    def at(self, offset: int) -> MetadataImage | None:
        """The image after the record at ``offset``; None when the log does not reach it."""
        if offset >= len(self.records):
            return None
        if offset not in self._at:
            below = max(o for o in self._at if o < offset)
            self._at[offset] = apply(self._at[below], self.records[below + 1 : offset + 1])
        return self._at[offset]

    def prepare(self, offsets: Iterable[int]) -> None:
        for offset in sorted(set(offsets)):  # ascending: each image builds on the one below
            self.at(offset)


def _write_outcomes(ops: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        if op["op"] == "write":
            attempts[op["key"]].append(op)
    return attempts


def _effect_visible(kind: str, op: dict[str, Any], image: MetadataImage) -> bool:
    """The write's postcondition on the image at its acknowledged offset."""
    if kind == "register":
        return op["cluster_id"] in image.clusters
    if kind == "create_topic":
        return op["name"] in image.topics
    if kind == "delete_topic":
        return op["name"] not in image.topics
    if kind == "cluster_state":
        cluster = image.clusters.get(op["cluster_id"])
        return cluster is not None and cluster.state == op["state"]
    if kind == "partition_state":
        topic = image.topics.get(op["topic"])
        return (
            topic is not None
            and op["partition"] < len(topic.partitions)
            and (topic.partitions[op["partition"]].state == op["state"])
        )
    raise ValueError(f"unknown write kind {kind!r}")


def check_writes(
    ops: Sequence[dict[str, Any]], log: Sequence[dict[str, Any]], images: _Images
) -> tuple[list[Anomaly], Counter[str]]:
    out: list[Anomaly] = []
    counts: Counter[str] = Counter()
    attempts = _write_outcomes(ops)
    # Where each created / deleted name appears in the log.
    positions: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in log:
        for record_type, field, _ in _UNIQUE.values():
            if r["type"] == record_type:
                positions[(record_type, r["data"][field])].append(r["offset"])
    images.prepare(op["offset"] for tries in attempts.values() for op in tries if op["outcome"] == "ok")
    asked: set[tuple[str, str]] = set()
    for key, tries in attempts.items():
        kind = tries[0]["kind"]
        acked = [op for op in tries if op["outcome"] == "ok"]
        unknown = any(op["outcome"] == "unknown" for op in tries)
        status = "ok" if acked else "unknown" if unknown else "failed"
        counts[status] += 1
        unique = _UNIQUE.get(kind)
        where: list[int] = []
        if unique is not None:
            record_type, _, arg = unique
            asked.add((record_type, tries[0][arg]))
            where = positions.get((record_type, tries[0][arg]), [])
            if len(where) > 1:
                out.append(
                    Anomaly("duplicate-write", f"{key} ({kind} {tries[0][arg]}) is in the log at offsets {where}")
                )
            if status == "failed" and where:
                out.append(Anomaly("failed-write-applied", f"{key} ({kind} {tries[0][arg]}) was refused "
                                   f"({tries[-1].get('status')}) but is in the log at {where}"))  # fmt: skip
        for op in acked:
            image = images.at(op["offset"])
            if image is None:
                out.append(Anomaly("lost-write", f"{key} ({kind}) acknowledged at offset {op['offset']}, "
                                   f"beyond the final log ({len(log)} records)"))  # fmt: skip
                continue
            if not _effect_visible(kind, op, image):
                out.append(Anomaly("lost-write", f"{key} ({kind} {_args(op)}) acknowledged at offset "
                                   f"{op['offset']}, but the log does not show it there"))  # fmt: skip
            if unique is not None and kind != "create_topic" and where and op["offset"] not in where:
                out.append(Anomaly("lost-write", f"{key} ({kind} {_args(op)}) acknowledged at offset "
                                   f"{op['offset']}, but its record is at {where}"))  # fmt: skip
            if unique is not None and not where:
                out.append(Anomaly("lost-write", f"{key} ({kind} {_args(op)}) acknowledged at offset "
                                   f"{op['offset']}, but its record is not in the log"))  # fmt: skip
    # Every record must answer some write (no agent runs, so nothing else writes), except the quorum's own
    # raise of its metadata version, once per version.
    state_writes = {
        (op["kind"], op.get("topic") or op.get("cluster_id"), op.get("partition"), op["state"])
        for tries in attempts.values()
        for op in tries
        if op["kind"] in ("cluster_state", "partition_state")
    }
    created_topics = {name for (record_type, name) in asked if record_type == "TopicCreated"}
    versions_raised: set[int] = set()
    for r in log:
        t, d = r["type"], r["data"]
        if t in ("ClusterRegistered", "TopicCreated", "TopicDeleted"):
            field = "cluster_id" if t == "ClusterRegistered" else "name"
            ok = (t, d[field]) in asked
        elif t == "PartitionsAdded":
            ok = d["topic"] in created_topics
        elif t == "PartitionStateChanged":
            ok = ("partition_state", d["topic"], d["partition"], d["state"]) in state_writes
        elif t == "ClusterStateChanged":
            ok = ("cluster_state", d["cluster_id"], None, d["state"]) in state_writes
        elif t == "MetadataVersionChanged":
            ok = d["version"] not in versions_raised
            versions_raised.add(d["version"])
        else:
            ok = False
        if not ok:
            out.append(Anomaly("phantom-record", f"offset {r['offset']}: {t} {d} answers no write in the history"))
    return out, counts


def _args(op: dict[str, Any]) -> str:
    skip = {"client", "op", "key", "kind", "node", "call", "ret", "outcome", "status", "offset", "error", "detail"}
    return " ".join(f"{k}={v}" for k, v in op.items() if k not in skip)


def check_tails(ops: Sequence[dict[str, Any]], log: Sequence[dict[str, Any]], images: _Images) -> list[Anomaly]:
    """Each tailer's pages, in the order it read them, must be the log itself: offsets 0, 1, 2, ... with
    no gap and no duplicate, each record the final log's. The one allowed jump is the API's own: after
    410 from every node the tailer loads ``/v1/snapshot`` at S (checked against apply of the log) and
    goes on at S+1."""
    out = []
    digests = [record_digest(r) for r in log]
    seen_by: dict[str, int] = {}
    for op in sorted((op for op in ops if op["op"] in ("tail", "snapshot")), key=lambda op: op["call"]):
        if op["outcome"] != "ok":
            continue
        client = op["client"]
        expected = seen_by.get(client, 0)
        if op["op"] == "snapshot":
            image = images.at(op["offset"])
            if image is None or _plain(metadata_view(image)) != op["metadata"]:
                out.append(Anomaly("metadata-mismatch", f"{client}: snapshot at {op['offset']} from node "
                                   f"{op['node']} differs from apply of the log"))  # fmt: skip
            if op["offset"] + 1 < expected:
                out.append(Anomaly("tail-order", f"{client}: snapshot at {op['offset']} after reading {expected - 1}"))
            seen_by[client] = op["offset"] + 1
            continue
        if op["offset"] != expected:
            out.append(Anomaly("tail-order", f"{client} asked node {op['node']} for offset {op['offset']} "
                               f"after reading up to {expected - 1}"))  # fmt: skip
            expected = op["offset"]
        for offset, digest in op["records"]:
            if offset != expected:
                what = "a duplicate" if offset < expected else "a gap"
                out.append(Anomaly("tail-order", f"{client} got offset {offset} from node {op['node']} where "
                                   f"{expected} was next ({what})"))  # fmt: skip
                if offset < expected:
                    continue
            if offset >= len(digests) or digests[offset] != digest:
                out.append(Anomaly("tail-mismatch", f"{client} read a record at offset {offset} from node "
                                   f"{op['node']} that is not the final log's"))  # fmt: skip
            expected = offset + 1
        seen_by[client] = expected
    return out


def check_leaders(ops: Sequence[dict[str, Any]]) -> list[Anomaly]:
    claims: Counter[tuple[int, int]] = Counter(
        (op["term"], op["node"]) for op in ops if op["op"] == "node" and op["role"] == "leader"
    )
    leaders: dict[int, list[int]] = defaultdict(list)
    for (term, node), seen in sorted(claims.items()):
        if seen >= 2:
            leaders[term].append(node)
    return [
        Anomaly("two-leaders", f"term {term}: nodes {nodes} each claimed leadership")
        for term, nodes in sorted(leaders.items())
        if len(nodes) > 1
    ]


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def check_metadata(samples: Sequence[tuple[str, dict[str, Any]]], images: _Images) -> list[Anomaly]:
    out = []
    images.prepare(body["offset"] for _, body in samples if body["offset"] >= 0)
    for where, body in samples:
        image = images.at(body["offset"]) if body["offset"] >= 0 else EMPTY_IMAGE
        if image is None:
            out.append(Anomaly("metadata-mismatch", f"{where}: metadata at offset {body['offset']}, beyond the log"))
            continue
        expected = _plain(metadata_view(image))
        if body != expected:
            diff = [k for k in ("offset", "clusters", "topics") if body.get(k) != expected.get(k)]
            out.append(Anomaly("metadata-mismatch", f"{where} (offset {body['offset']}): {', '.join(diff)} differ "
                               "from apply of the log"))  # fmt: skip
    return out
