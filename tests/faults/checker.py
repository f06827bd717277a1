"""The history checker: what must hold after any schedule of faults.

``check(ops, logs, metadata)`` takes the recorded operations (see ``history.py``), every node's final log
(``GET /v1/log`` from 0, after healing) and every node's final ``GET /v1/metadata``; it returns the
anomalies found (an empty list when all holds):

- ``log-gap``: a node's offsets are not S, S+1, S+2, ... from where its window starts;
- ``log-diverged``: two nodes (every pair, not only neighbours) disagree on a record both serve;
- ``log-length``: the nodes do not end at the same offset after healing, or one serves less than it applied;
- ``log-incomplete`` / ``log-invalid``: offsets nobody holds / a record that ``apply`` refuses;
- ``lost-write``: an acknowledged write whose effect is not at its acknowledged offset: its own record is
  not there and the image there does not show it (a state change already in force is a no-op, answered
  with the image's offset); a write that always makes a record (register, create, delete) must be there;
- ``shared-offset``: two writes that each must make a record acknowledged at one offset;
- ``ack-order``: a write acknowledged at an offset below one that was acknowledged before it was sent
  (the log's order contradicts real time);
- ``duplicate-write``: a write whose effect is in the log twice (or an agent's cluster registered twice);
- ``failed-write-applied``: a write refused (4xx) on every attempt, yet its effect is in the log;
- ``retry-disagrees``: two definite answers to one Idempotency-Key that differ, or a retry after an
  unknown outcome answered 4xx (or as a no-op) although the write's effect is in the log;
- ``phantom-record``: a record that answers no write, no agent and none of the quorum's own duties;
- ``tail-order`` / ``tail-mismatch``: a tailer that saw a gap, a duplicate, a reordering / another record;
- ``tail-missing`` / ``tail-foreign``: a tailer of some topics (``topics=``) not sent a record it must get /
  sent one of another topic;
- ``tail-jump``: a tailer that skipped ahead through a snapshot without a 410 at the offset it was at;
- ``false-410``: a 410 for an offset inside the window the same answer declares;
- ``two-leaders``: two nodes that each claimed leadership in the same term (each seen at least twice:
  a node's term and role are read separately, so one poll can catch a deposed leader's new term);
- ``metadata-mismatch``: a ``/v1/metadata`` answer or a loaded snapshot that differs from the pure
  ``apply`` of the log's records up to its offset.

Every record of the log is tied to the one thing that asked for it. A write's *effect* is the records it
made (a created topic's ``TopicCreated`` and its ``PartitionsAdded`` or ``PartitionRangeAdded``; one record
otherwise); its
*signature* is what it asked for (``("partition_state", topic, partition, state)``). An acknowledged write
is tied to the effect ending at its acknowledged offset. Every other effect is tied, in log order, to a
write with its signature that could have made it in real time (sent before any write at or after that
offset was acknowledged, and placed after every write acknowledged before it was sent): an unknown one
first (allowed once), then a refused one, then one already tied (both anomalies). What is left over is a
phantom.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metadata_log.codec import record_from_dict
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, apply
from metadata_log.selection import Selection
from metadata_log.views import metadata_view

from .history import record_digest

ALWAYS_RECORDS = frozenset({"register", "create_topic", "delete_topic"})
"""Write kinds that never succeed as a no-op in the harness: every name they carry is fresh."""
QUORUM_OWN = frozenset({"metadata_version", "fencing", "NoOp"})
"""Effects the quorum makes itself: the metadata version raise, fencing decided from leases, and the ``NoOp`` a
leader commits before it answers a write that changes nothing."""


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
    retried_after_unknown: int  # writes with an unknown attempt that a same-key retry then answered
    replayed: int  # answers the node marked ``Idempotency-Replayed``: a retry answered from the first outcome
    tail_pages: int
    tail_records: int
    gone: int  # 410 answers to tailers
    snapshots_loaded: int
    node_polls: int
    metadata_checks: int
    log_length: int
    fences: dict[str, int] = field(default_factory=dict)  # cluster -> times fenced in the log


def check(
    ops: Sequence[dict[str, Any]],
    logs: Mapping[int, Sequence[dict[str, Any]]],
    metadata: Mapping[Any, dict[str, Any]],
    archive: Iterable[dict[str, Any]] = (),
    ends: Mapping[int, int] | None = None,
    agent_clusters: Iterable[str] = (),
) -> tuple[list[Anomaly], Summary]:
    """All the checks; ``archive``: full records the tailers read (the log below every node's dump); ``ends``:
    each node's last applied offset at the end (see ``check_logs``); ``agent_clusters``: clusters whose
    ``kfed agent`` ran (it registers them and reports their partitions)."""
    anomalies: list[Anomaly] = []
    anomalies += check_logs(logs, ends)
    final, incomplete = reference_log(logs, archive)
    anomalies += incomplete
    final, invalid = valid_prefix(final)
    anomalies += invalid
    images = _Images(final)
    writes = _writes(ops)
    anomalies += check_writes(writes, final, images, frozenset(agent_clusters))
    anomalies += check_tails(ops, final, images)
    anomalies += check_leaders(ops)
    samples = [(f"node {op['node']} at {op['ret']} s", op["body"]) for op in ops if op["op"] == "metadata"]
    samples += [(f"node {n} at the end", body) for n, body in sorted(metadata.items())]
    anomalies += check_metadata(samples, images)
    tails = [op for op in ops if op["op"] == "tail" and op["outcome"] == "ok"]
    attempts = [op for op in ops if op["op"] == "write"]
    summary = Summary(
        writes=len(writes),
        acknowledged=sum(1 for w in writes.values() if w.status == "ok"),
        unknown=sum(1 for w in writes.values() if w.status == "unknown"),
        failed=sum(1 for w in writes.values() if w.status == "failed"),
        unknown_attempts=sum(1 for op in attempts if op["outcome"] == "unknown"),
        retried_after_unknown=sum(1 for w in writes.values() if w.retried_after_unknown),
        replayed=sum(1 for op in attempts if op.get("replayed")),
        tail_pages=len(tails),
        tail_records=sum(len(op["records"]) for op in tails),
        gone=sum(1 for op in ops if op.get("status") == 410),  # only reads by offset answer 410
        snapshots_loaded=sum(1 for op in ops if op["op"] == "snapshot"),  # recorded when loaded
        node_polls=sum(1 for op in ops if op["op"] == "node"),
        metadata_checks=len(samples),
        log_length=len(final),
        fences=dict(Counter(r["data"]["cluster_id"] for r in final if r["type"] == "ClusterFenced")),
    )
    return anomalies, summary


def check_logs(logs: Mapping[int, Sequence[dict[str, Any]]], ends: Mapping[int, int] | None = None) -> list[Anomaly]:
    """Each node's log is gap-free from where it starts (a node restarted from a dump, or caught up through
    the leader's snapshot, serves records after it only: possibly none). Every node is compared with every
    other over the offsets both serve, and all end together after healing. A node's end is its last applied
    offset when ``ends`` has it (a log it serves must end there too), else the last record it serves."""
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
    for a, b in itertools.combinations(sorted(logs), 2):
        for offset in sorted(by_offset[a].keys() & by_offset[b].keys()):
            if by_offset[a][offset] != by_offset[b][offset]:
                out.append(Anomaly("log-diverged", f"nodes {a} and {b} differ at offset {offset}: "
                                   f"{by_offset[a][offset]} vs {by_offset[b][offset]}"))  # fmt: skip
                break
    final_ends = {n: ends.get(n, log[-1]["offset"] if log else None) for n, log in logs.items()}
    if len(set(final_ends.values())) > 1:
        out.append(Anomaly("log-length", f"after healing the nodes end apart: {dict(sorted(final_ends.items()))}"))
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
    image = EMPTY_IMAGE
    for i, record in enumerate(records):
        try:
            image = apply(image, [record])
        except InvalidRecord as e:
            return list(log[:i]), [Anomaly("log-invalid", f"offset {i} does not apply: {e}; checked up to {i - 1}")]
    return list(log), []


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


# -- writes ----------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Effect:
    first: int
    last: int
    signature: tuple[Any, ...]
    tied: list[_Write] = field(default_factory=list)


@dataclass(eq=False)
class _Write:
    key: str
    tries: list[dict[str, Any]]
    effects: list[_Effect] = field(default_factory=list)
    noop_at: int | None = None  # acknowledged without a record of its own: a state already in force

    @property
    def kind(self) -> str:
        return str(self.tries[0]["kind"])

    @property
    def signature(self) -> tuple[Any, ...]:
        op = self.tries[0]
        if self.kind in ("register", "cluster_state"):
            return (self.kind, op["cluster_id"], *((op["state"],) if self.kind == "cluster_state" else ()))
        if self.kind in ("create_topic", "delete_topic"):
            return (self.kind, op["name"])
        if self.kind == "partition_state":
            return (self.kind, op["topic"], op["partition"], op["state"])
        raise ValueError(f"unknown write kind {self.kind!r}")

    @property
    def first_call(self) -> float:
        return float(self.tries[0]["call"])

    @property
    def acked(self) -> dict[str, Any] | None:
        return next((op for op in self.tries if op["outcome"] == "ok"), None)

    @property
    def status(self) -> str:
        outcomes = {op["outcome"] for op in self.tries}
        return "ok" if "ok" in outcomes else "failed" if "failed" in outcomes else "unknown"

    @property
    def retried_after_unknown(self) -> bool:
        unknown = [i for i, op in enumerate(self.tries) if op["outcome"] == "unknown"]
        return bool(unknown) and any(op["outcome"] != "unknown" for op in self.tries[unknown[0] :])

    def describe(self) -> str:
        return f"{self.key} ({' '.join(str(part) for part in self.signature)})"


def _writes(ops: Sequence[dict[str, Any]]) -> dict[str, _Write]:
    writes: dict[str, _Write] = {}
    for op in sorted((op for op in ops if op["op"] == "write"), key=lambda op: op["call"]):
        writes.setdefault(op["key"], _Write(op["key"], [])).tries.append(op)
    return writes


_SIGNATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    # record type -> (what asked for it, the record's fields that say what exactly)
    "ClusterRegistered": ("register", ("cluster_id",)),
    "TopicCreated": ("create_topic", ("name",)),
    "TopicDeleted": ("delete_topic", ("name",)),
    "ClusterStateChanged": ("cluster_state", ("cluster_id", "state")),
    "PartitionStateChanged": ("partition_state", ("topic", "partition", "state")),
    "PartitionsAdded": ("add_partitions", ("topic",)),
    "PartitionRangeAdded": ("add_partitions", ("topic",)),
    "PartitionRangeStateChanged": ("shrink", ("topic",)),
    "PhysicalLeadersReported": ("report", ("cluster_id",)),
    "MetadataVersionChanged": ("metadata_version", ("version",)),
    "ClusterFenced": ("fencing", ("cluster_id",)),
    "ClusterUnfenced": ("fencing", ("cluster_id",)),
    "PhysicalPartitionsReported": ("report", ("cluster_id",)),
}


ADDED_PARTITIONS = frozenset({"PartitionsAdded", "PartitionRangeAdded"})
"""What follows a ``TopicCreated`` in its command: a record per partition, or (metadata version 4) per range."""


def _effects(log: Sequence[dict[str, Any]]) -> list[_Effect]:
    """The log cut into what each write (or agent, or the quorum itself) made, with its signature."""
    effects: list[_Effect] = []
    last = _Effect(-2, -2, ())
    for r in log:
        t, d, offset = r["type"], r["data"], r["offset"]
        # a created topic's partitions follow it in its own command (``last`` ends at ``offset - 1``)
        if t in ADDED_PARTITIONS and last.signature == ("create_topic", d["topic"]):
            last.last = offset
            continue
        kind, fields = _SIGNATURES.get(t, (t, ()))
        signature = (kind, *(d[f] for f in fields))
        last = _Effect(offset, offset, signature)
        effects.append(last)
    return effects


class _RealTime:
    """What the acknowledgements say about when offsets were committed: an ok answer at offset X returned
    after X was committed, so a write sent after that answer cannot land at or below X."""

    def __init__(self, writes: Iterable[_Write]) -> None:
        by_ret = sorted((op["ret"], op["offset"]) for w in writes for op in w.tries if op["outcome"] == "ok")
        self._rets = [r for r, _ in by_ret]
        self._known = list(itertools.accumulate((o for _, o in by_ret), max))

    def known_before(self, t: float) -> int:
        """The highest offset acknowledged before ``t`` (-1: none)."""
        i = bisect.bisect_left(self._rets, t)
        return self._known[i - 1] if i else -1

    def could_make(self, write: _Write, effect: _Effect) -> bool:
        """Whether ``write`` could have made ``effect``: it lies beyond every offset acknowledged before the
        write was sent (which also means the write was sent before any answer showed ``effect`` committed)."""
        return effect.first > self.known_before(write.first_call)


def check_writes(
    writes: Mapping[str, _Write], log: Sequence[dict[str, Any]], images: _Images, agent_clusters: frozenset[str]
) -> list[Anomaly]:
    out = check_retries(writes)
    effects = _effects(log)
    ending_at = {e.last: e for e in effects}
    real_time = _RealTime(writes.values())
    images.prepare(w.acked["offset"] for w in writes.values() if w.acked)
    acked = [w for w in writes.values() if w.acked is not None]
    # The effect ending at an acknowledged offset belongs to the acknowledged write with its signature.
    for w in acked:
        effect = ending_at.get(w.acked["offset"])  # type: ignore[index]
        if effect is not None and effect.signature == w.signature and not effect.tied:
            effect.tied.append(w)
            w.effects.append(effect)
    for w in acked:
        out += _check_ack(w, ending_at, images, real_time, len(log))
    out += _tie_the_rest(effects, writes, real_time, agent_clusters)
    return out


def check_retries(writes: Mapping[str, _Write]) -> list[Anomaly]:
    """Every definite answer to one key must be the same: one offset, or a refusal."""
    out = []
    for w in writes.values():
        answers = {(op["outcome"], op.get("offset")) for op in w.tries if op["outcome"] != "unknown"}
        if len(answers) > 1:
            out.append(Anomaly("retry-disagrees", f"{w.describe()} got different answers: {sorted(answers, key=str)}"))
    return out


def _check_ack(
    w: _Write, ending_at: Mapping[int, _Effect], images: _Images, real_time: _RealTime, log_length: int
) -> list[Anomaly]:
    """An acknowledged write's effect is in force at its offset, and the offset fits real time."""
    offset = w.acked["offset"]  # type: ignore[index]
    known = real_time.known_before(w.first_call)
    if w.effects:
        if offset <= known:
            return [Anomaly("ack-order", f"{w.describe()} acknowledged at {offset}, yet offset {known} had been "
                            "acknowledged before it was sent")]  # fmt: skip
        return []
    other = ending_at.get(offset)
    if w.kind in ALWAYS_RECORDS:
        if other is not None and other.tied:
            return [Anomaly("shared-offset", f"{w.describe()} and {other.tied[0].describe()} were both "
                            f"acknowledged at offset {offset}")]  # fmt: skip
        return [Anomaly("lost-write", f"{w.describe()} acknowledged at offset {offset} (the final log has "
                        f"{log_length} records), but its record is not there")]  # fmt: skip
    image = images.at(offset)
    if image is None or not _effect_visible(w.kind, w.tries[0], image):
        return [Anomaly("lost-write", f"{w.describe()} acknowledged at offset {offset} (the final log has "
                        f"{log_length} records), but the log does not show it there")]  # fmt: skip
    w.noop_at = offset
    if offset < known:
        return [Anomaly("ack-order", f"{w.describe()} answered as a no-op at {offset}, from an image older "
                        f"than offset {known}, acknowledged before it was sent")]  # fmt: skip
    return []


def _tie_the_rest(
    effects: Sequence[_Effect], writes: Mapping[str, _Write], real_time: _RealTime, agent_clusters: frozenset[str]
) -> list[Anomaly]:
    """Tie each effect no acknowledgement claimed to a write that could have made it (see the module)."""
    out: list[Anomaly] = []
    by_signature: dict[tuple[Any, ...], list[_Write]] = defaultdict(list)
    for w in writes.values():
        by_signature[w.signature].append(w)
    versions_raised: set[int] = set()
    agents_registered: set[str] = set()
    for e in effects:
        if e.tied:
            continue
        where = f"offsets {e.first}-{e.last}"
        kind = e.signature[0]
        if kind == "metadata_version":
            if e.signature[1] in versions_raised:
                out.append(Anomaly("phantom-record", f"{where}: the metadata version {e.signature[1]} raised again"))
            versions_raised.add(e.signature[1])
            continue
        if kind in QUORUM_OWN or (kind == "report" and e.signature[1] in agent_clusters):
            continue
        if kind == "register" and e.signature[1] in agent_clusters:
            if e.signature[1] in agents_registered:
                out.append(Anomaly("duplicate-write", f"{where}: agent cluster {e.signature[1]} registered again"))
            agents_registered.add(e.signature[1])
            continue
        able = [w for w in by_signature.get(e.signature, []) if real_time.could_make(w, e)]
        out += _tie_one(e, where, able)
    return out


def _tie_one(e: _Effect, where: str, able: list[_Write]) -> list[Anomaly]:
    """Tie ``e`` to the best of the writes ``able`` to make it, earliest sent first; the anomaly if any."""
    for wanted in ("unknown", "failed"):
        untied = [w for w in able if w.status == wanted and not w.effects]
        if untied:
            w = min(untied, key=lambda w: w.first_call)
            e.tied.append(w)
            w.effects.append(e)
            if wanted == "unknown":
                return []
            if w.retried_after_unknown:
                why = f"a retry after an unknown outcome was refused ({w.tries[-1].get('status')})"
                return [Anomaly("retry-disagrees", f"{w.describe()}: {why}, yet the write is in the log at {where}")]
            return [Anomaly("failed-write-applied", f"{w.describe()} was refused ({w.tries[-1].get('status')}) "
                            f"but is in the log at {where}")]  # fmt: skip
    if able:
        w = min(able, key=lambda w: w.first_call)
        e.tied.append(w)
        if w.noop_at is not None and w.retried_after_unknown:
            return [Anomaly("retry-disagrees", f"{w.describe()}: a retry after an unknown outcome was answered as "
                            f"a no-op at {w.noop_at}, yet the write is in the log at {where}")]  # fmt: skip
        earlier = [f"{x.first}-{x.last}" for x in w.effects]
        w.effects.append(e)
        return [Anomaly("duplicate-write", f"{w.describe()} is in the log at {where}; also tied to offsets "
                        f"{earlier}, answered as a no-op at {w.noop_at}")]  # fmt: skip
    return [Anomaly("phantom-record", f"{where}: {' '.join(map(str, e.signature))} answers no write in the history")]


def _effect_visible(kind: str, op: dict[str, Any], image: MetadataImage) -> bool:
    """A state change's postcondition on the image at its acknowledged offset."""
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
    raise ValueError(f"no postcondition for write kind {kind!r}")


# -- tailers, leaders, metadata ----------------------------------------------------------------------
def check_tails(ops: Sequence[dict[str, Any]], log: Sequence[dict[str, Any]], images: _Images) -> list[Anomaly]:
    """Each tailer's pages, in the order it read them, must be the log itself: offsets 0, 1, 2, ... with
    no gap and no duplicate, each record the final log's. The one allowed jump is the API's own: after a
    410 at the offset it was at (from every node) the tailer loads ``/v1/snapshot`` at S (checked against
    apply of the log) and goes on at S+1. A tailer of some topics is checked page by page (see
    ``_check_selected_page``), its snapshot against the selection of apply of the log."""
    out = []
    digests = [record_digest(r) for r in log]
    seen_by: dict[str, int] = {}
    gone_at: dict[str, int] = {}  # the offset of a tailer's last 410 since its last page
    for op in sorted((op for op in ops if op["op"] in ("tail", "snapshot")), key=lambda op: op["call"]):
        client = op["client"]
        expected = seen_by.get(client, 0)
        if op.get("status") == 410:
            gone_at[client] = op["offset"]
            if op.get("log_start_offset", op["offset"] + 1) <= op["offset"]:
                out.append(Anomaly("false-410", f"{client}: node {op['node']} answered 410 for offset {op['offset']} "
                                   f"with its window starting at {op['log_start_offset']}"))  # fmt: skip
            continue
        if op["outcome"] != "ok":
            continue
        if op["op"] == "snapshot":
            out += _check_snapshot(op, expected, gone_at.pop(client, None), images)
            seen_by[client] = op["offset"] + 1
            continue
        gone_at.pop(client, None)
        if "topics" in op:
            out += _check_selected_page(op, expected, digests, images)
            seen_by[client] = op["next_offset"]
            continue
        for offset, digest in op["records"]:
            if offset != expected:
                out.append(Anomaly("tail-order", f"{client} got offset {offset} from node {op['node']} where "
                                   f"{expected} was next"))  # fmt: skip
                if offset < expected:
                    continue
            if offset >= len(digests) or digests[offset] != digest:
                out.append(Anomaly("tail-mismatch", f"{client} read a record at offset {offset} from node "
                                   f"{op['node']} that is not the final log's"))  # fmt: skip
            expected = offset + 1
        seen_by[client] = expected
    return out


def _check_snapshot(op: dict[str, Any], expected: int, gone_at: int | None, images: _Images) -> list[Anomaly]:
    out = []
    client, offset = op["client"], op["offset"]
    image = images.at(offset)
    if image is not None and "topics" in op:
        image = Selection.of(op["topics"], image).image(image)
    if image is None or _plain(metadata_view(image)) != op["metadata"]:
        out.append(Anomaly("metadata-mismatch", f"{client}: snapshot at {offset} from node {op['node']} differs "
                           "from apply of the log"))  # fmt: skip
    if offset + 1 < expected:
        out.append(Anomaly("tail-order", f"{client}: snapshot at {offset} after reading {expected - 1}"))
    if offset + 1 > expected and gone_at != expected:
        out.append(Anomaly("tail-jump", f"{client} jumped from offset {expected} to {offset + 1} through a snapshot "
                           f"without a 410 at {expected} (last 410: {gone_at})"))  # fmt: skip
    return out


def _check_selected_page(op: dict[str, Any], expected: int, digests: Sequence[str], images: _Images) -> list[Anomaly]:
    """A page of a tailer of some topics, read from ``expected`` up to its ``next_offset``: records of the final
    log at increasing offsets in between; each record there a follower of the topics must get (their own, the
    leaders of physical topics named like them, every federation-wide kind: ``Selection`` without placements)
    sent, and each sent one of those or the leaders of a physical topic they are placed on (at the page's end
    or the log's: the node selects with its newest image)."""
    out = []
    client, node, end = op["client"], op["node"], op["next_offset"]
    if end > len(digests):
        out.append(Anomaly("tail-mismatch", f"{client}: node {node}'s page ends at {end}, beyond the log"))
        end = len(digests)
    got = dict(op["records"])
    offsets = [offset for offset, _ in op["records"]]
    if offsets != sorted(set(offsets)) or not all(expected <= offset < end for offset in offsets):
        out.append(Anomaly("tail-order", f"{client} got offsets {offsets[:10]} from node {node} for {expected}..{end}"))
    must = Selection(frozenset(op["topics"]))
    may = [Selection.of(op["topics"], image) for image in (images.at(end - 1), images.at(len(digests) - 1))]
    for offset in range(expected, end):
        record = images.records[offset]
        if offset not in got:
            if must.wants(record):
                out.append(Anomaly("tail-missing", f"{client} was not sent offset {offset} by node {node}"))
        elif got[offset] != digests[offset]:
            out.append(Anomaly("tail-mismatch", f"{client} read a record at offset {offset} from node {node} that "
                               "is not the final log's"))  # fmt: skip
        elif not any(selection.wants(record) for selection in may):
            out.append(Anomaly("tail-foreign", f"{client} was sent offset {offset} of another topic by node {node}"))
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
    images.prepare(body["offset"] for _, body in samples)
    for where, body in samples:
        image = images.at(body["offset"])  # -1: the empty image
        if image is None:
            out.append(Anomaly("metadata-mismatch", f"{where}: metadata at offset {body['offset']}, beyond the log"))
            continue
        expected = _plain(metadata_view(image))
        if body != expected:
            diff = [k for k in ("offset", "clusters", "topics") if body.get(k) != expected.get(k)]
            out.append(Anomaly("metadata-mismatch", f"{where} (offset {body['offset']}): {', '.join(diff)} differ "
                               "from apply of the log"))  # fmt: skip
    return out
