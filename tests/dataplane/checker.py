"""The data plane's history checker, in the manner of Jepsen's Kafka workloads (Bufstream's analysis is the
anchor): what every producer, consumer and transaction recorded, checked against what Kafka's contract and
kfed's promises allow.

``check(ops)`` takes the recorded operations, in any order, each a dict with ``op`` and its fields:

- ``topic``: ``topic``, ``key_order`` (``strict`` or ``none``);
- ``send``: ``client``, ``id`` (unique per message), ``topic``, ``key`` (or None), ``seq`` (the producer's
  sequence number of the message within its key, or None), ``txn`` (or None), ``via`` (``sdk`` or
  ``gateway``), ``call`` (when it was sent, or the earliest it can have been);
- ``ack``: ``id``, ``outcome`` (``ok``, ``failed`` or ``unknown``), and when ``ok`` ``partition`` and
  ``offset`` (logical; None when the client was not told: the gateway answers -1 on a strict topic);
- ``txn``: ``txn``, ``outcome`` (``commit``, ``abort`` or ``unknown``), as its producer was told;
- ``subscribe``: ``group``, ``topic``, ``isolation`` (``read_committed`` or ``read_uncommitted``);
- ``assign`` / ``revoke``: ``group``, ``member``, ``topic``, ``partition``, ``at``;
- ``read``: ``group``, ``member``, ``id``, ``topic``, ``partition``, ``offset``, ``at`` (one per record a
  member's application was handed);
- ``commit``: ``group``, ``member``, ``topic``, ``partition``, ``offset`` (the next one to read),
  ``outcome`` (``ok`` or not), ``at``;
- ``member_end``: ``group``, ``member``, ``how`` (``left``, ``killed`` or ``expired``), ``at``;
- ``fault``: ``kind`` and ``at``; gateways' and brokers' kills and pauses are read (``GATEWAY_FAULTS``,
  ``BROKER_FAULTS``);
- ``seal``: ``topic``, ``partition``, ``offset``: a ``KeyOrderSealed`` record of the log.

It returns the anomalies found (an empty list when all holds) and a summary of what it counted:

- ``lost``: a message a group should read (acknowledged, or of a transaction told committed; on a topic the
  group subscribed to) that the group never read;
- ``duplicate``: a message one group read twice, unless an earlier reader ended by a kill or an expired
  session before committing past it (graceful joins and leaves, which commit what they read, give none),
  or, on a strict topic, the partition left its first reader before the second read (a member's commit
  stays at its first held record, so the next owner reads again what followed it: ``docs/KEY_ORDER.md``,
  counted as ``redelivered``); a message read at two positions was written twice, which a client through the
  gateway may see when a gateway it used died or stalled between the send and its acknowledgement (its
  idempotence state is per gateway instance, ``gateway/producers.py``), or on a strict topic a broker did
  (a part whose answer never came is placed again by the key map, which may have moved), or an SDK
  key-less message when a broker died or stalled (re-routed, maybe written): ``rewritten``;
- ``aborted-read``: a read_committed group read a message of a transaction told aborted;
- ``torn-commit``: a read_committed group read some of a committed transaction's messages and not others;
- ``phantom-read``: a read of a message nobody sent, or at a partition or offset other than its
  acknowledgement's;
- ``key-order``: on a strict topic, a group first read a key's messages out of their sequence, unless the
  late one lies at or past a seal of its partition (a late write, delivered as it comes: ``late_writes``);
- ``offset-backwards``: one member read offsets of a partition out of order while it held it (on a
  ``none`` topic: on a strict one, records held back for key order are handed out after later ones).

Transactions' visibility: ``visibility="participant"`` (kfed today) allows a read_committed reader to see a
committed transaction's part on one sub-cluster before another's; the check of ``"together"`` (all parts at
once, once the gateway serves transactions) needs the readers' empty polls in the history, and is refused
until they are recorded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.faults.checker import Anomaly  # one anomaly type for both planes' checkers

Visibility = Literal["participant", "together"]
GRACEFUL = "left"
GATEWAY_FAULTS = frozenset({"kill_gateway", "pause_gateway"})
BROKER_FAULTS = frozenset({"kill_broker", "pause_broker"})


@dataclass(slots=True)
class Summary:
    """What the checker counted: the figures a run prints beside its anomalies."""

    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    committed_txns: int = 0
    aborted_txns: int = 0
    reads: int = 0
    commits: int = 0
    excused_duplicates: int = 0
    redelivered: int = 0
    rewritten: int = 0
    late_writes: int = 0


@dataclass(slots=True)
class _Message:
    send: dict[str, Any]
    ack: dict[str, Any] | None = None
    reads: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))  # by group

    @property
    def outcome(self) -> str:
        return self.ack["outcome"] if self.ack is not None else "unknown"


@dataclass(slots=True)
class _Parsed:
    """A history's messages, transactions' outcomes, strict topics and subscriptions."""

    ops: list[dict[str, Any]]
    messages: dict[str, _Message] = field(default_factory=dict)
    txns: dict[str, str] = field(default_factory=dict)
    strict: set[str] = field(default_factory=set)
    groups: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))  # group -> topic -> isolation
    seals: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> its first seal


def _parse(ops: Iterable[dict[str, Any]]) -> _Parsed:
    parsed = _Parsed(sorted(ops, key=lambda op: op.get("at", op.get("ret", op.get("call", 0.0)))))
    for op in parsed.ops:
        kind = op["op"]
        if kind == "topic" and op["key_order"] == "strict":
            parsed.strict.add(op["topic"])
        elif kind == "send":
            parsed.messages[op["id"]] = _Message(op)
        elif kind == "subscribe":
            parsed.groups[op["group"]][op["topic"]] = op["isolation"]
        elif kind == "txn":
            parsed.txns[op["txn"]] = op["outcome"]
        elif kind == "seal":
            where = (op["topic"], op["partition"])
            parsed.seals[where] = min(op["offset"], parsed.seals.get(where, op["offset"]))
    for op in parsed.ops:
        if op["op"] == "ack":
            parsed.messages[op["id"]].ack = op  # the harness records a message's send before its acknowledgement
    return parsed


def must_read(ops: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """Per group, the ids it must read by the end (what ``lost`` counts): for a run waiting on its readers."""
    parsed = _parse(ops)
    wanted: dict[str, set[str]] = {group: set() for group in parsed.groups}
    for m in parsed.messages.values():
        for group, topics in parsed.groups.items():
            isolation = topics.get(m.send["topic"])
            if isolation is not None and _should_read(m, parsed.txns, isolation):
                wanted[group].add(m.send["id"])
    return wanted


def check(ops: Iterable[dict[str, Any]], visibility: Visibility = "participant") -> tuple[list[Anomaly], Summary]:
    if visibility != "participant":
        raise ValueError("visibility 'together' needs the readers' empty polls in the history: not recorded yet")
    parsed = _parse(ops)
    messages, txns, ops = parsed.messages, parsed.txns, parsed.ops
    summary = Summary()
    out: list[Anomaly] = []
    stalls = _stalls(ops, parsed.strict)
    for op in ops:
        if op["op"] != "read":
            continue
        summary.reads += 1
        m = messages.get(op["id"])
        if m is None or m.send["topic"] != op["topic"]:
            out.append(Anomaly("phantom-read", f"{_member(op)} read {op['id']!r}, which nobody sent to {op['topic']}"))
            continue
        # an acknowledgement says where the message is, unless its client was not told (offset None)
        where = (m.ack["partition"], m.ack["offset"]) if m.outcome == "ok" else None  # type: ignore[index]
        if where is not None and where[1] is not None and where != (op["partition"], op["offset"]) and \
                not _maybe_written_twice(m, stalls):  # fmt: skip  # the copy of a batch written twice: counted below
            out.append(Anomaly("phantom-read", f"{_member(op)} read {op['id']!r} at {op['partition']}/{op['offset']}, "
                               f"acknowledged at {where[0]}/{where[1]}"))  # fmt: skip
        m.reads[op["group"]].append(op)
    _count(messages, txns, ops, summary)
    out += _lost_aborted_torn(messages, txns, parsed.groups)
    out += _duplicates(messages, ops, parsed.strict, stalls, summary)
    out += _key_order(messages, parsed.strict, parsed.groups, parsed.seals, summary)
    out += _offsets(ops, parsed.strict)
    return out, summary


def _member(op: dict[str, Any]) -> str:
    return f"{op['group']}/{op['member']}"


def _count(messages: dict[str, _Message], txns: dict[str, str], ops: Sequence[dict[str, Any]], s: Summary) -> None:
    s.sent = len(messages)
    outcomes = [m.outcome for m in messages.values()]
    s.acknowledged, s.failed, s.unknown = outcomes.count("ok"), outcomes.count("failed"), outcomes.count("unknown")
    s.committed_txns = sum(1 for o in txns.values() if o == "commit")
    s.aborted_txns = sum(1 for o in txns.values() if o == "abort")
    s.commits = sum(1 for op in ops if op["op"] == "commit" and op.get("outcome") == "ok")


def _should_read(m: _Message, txns: dict[str, str], isolation: str) -> bool | None:
    """Whether a group of ``isolation`` must read ``m`` (True), must not (False), or may (None)."""
    txn = m.send.get("txn")
    if txn is None:
        return True if m.outcome == "ok" else None
    outcome = txns.get(txn, "unknown")
    if outcome == "commit":  # a transaction commits only with every message delivered
        return True
    if outcome == "abort" and isolation == "read_committed":
        return False
    return None


def _lost_aborted_torn(messages: dict[str, _Message], txns: dict[str, str],
                       groups: dict[str, dict[str, str]]) -> list[Anomaly]:  # fmt: skip
    out = []
    by_txn: dict[tuple[str, str], list[_Message]] = defaultdict(list)  # (group, txn) -> its messages the group reads
    for m in messages.values():
        topic = m.send["topic"]
        for group, topics in groups.items():
            isolation = topics.get(topic)
            if isolation is None:
                continue
            must = _should_read(m, txns, isolation)
            read = bool(m.reads.get(group))
            if must and not read:
                out.append(Anomaly("lost", f"group {group} never read {m.send['id']!r} of {topic}"))
            elif must is False and read:
                out.append(Anomaly("aborted-read", f"group {group} read {m.send['id']!r} of aborted "
                                   f"transaction {m.send['txn']!r}"))  # fmt: skip
            txn = m.send.get("txn")
            if txn is not None and isolation == "read_committed" and txns.get(txn) == "commit":
                by_txn[(group, txn)].append(m)
    for (group, txn), parts in by_txn.items():
        read = [m for m in parts if m.reads.get(group)]
        if read and len(read) < len(parts):
            out.append(Anomaly("torn-commit", f"group {group} read {len(read)} of the {len(parts)} messages of "
                               f"committed transaction {txn!r}"))  # fmt: skip
    return out


def _duplicates(messages: dict[str, _Message], ops: Sequence[dict[str, Any]], strict: set[str],
                stalls: _Stalls, summary: Summary) -> list[Anomaly]:  # fmt: skip
    """A second read by one group is a duplicate unless a member that read it before ended ungracefully
    without an acknowledged commit past it, or (strict topics) had the partition taken away before."""
    ends = {(op["group"], op["member"]): op for op in ops if op["op"] == "member_end"}
    commits: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
    left: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)  # when a member lost a partition
    for op in ops:
        if op["op"] == "commit" and op.get("outcome") == "ok":
            commits[(op["group"], op["member"], op["topic"], op["partition"])].append(op)
        elif op["op"] == "revoke":
            left[(op["group"], op["member"], op["topic"], op["partition"])].append(op["at"])
    out = []
    for m in messages.values():
        for group, reads in m.reads.items():
            for i, again in enumerate(reads[1:], start=1):
                if any(_excused(first, again, ends, commits) for first in reads[:i]):
                    summary.excused_duplicates += 1
                    continue
                if again["topic"] in strict and any(_moved(first, again, ends, left) for first in reads[:i]):
                    summary.redelivered += 1
                    continue
                if _written_twice(reads[0], again) and _maybe_written_twice(m, stalls):
                    summary.rewritten += 1
                    continue
                out.append(Anomaly("duplicate", f"group {group} read {m.send['id']!r} again ({_member(again)} "
                                   f"after {_member(reads[0])}{_written_twice(reads[0], again)})"))  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class _Stalls:
    """When the faults happened after which a message may be written twice (``_maybe_written_twice``)."""

    gateways: list[float]
    brokers: list[float]
    strict: set[str]


def _stalls(ops: Sequence[dict[str, Any]], strict: set[str]) -> _Stalls:
    faults = [op for op in ops if op["op"] == "fault"]
    return _Stalls([op["at"] for op in faults if op["kind"] in GATEWAY_FAULTS],
                   [op["at"] for op in faults if op["kind"] in BROKER_FAULTS], strict)  # fmt: skip


def _maybe_written_twice(m: _Message, stalls: _Stalls) -> bool:
    """Whether a fault that may make ``m`` be written twice came between its send and its acknowledgement: a
    gateway's death or stall for its clients; a broker's for the gateway's on a strict topic (a part whose
    answer never came is placed again by the key map) and for the SDK's key-less messages (re-routed to
    another cluster, though the broker may have written them before it died: librdkafka does not say). Never
    for a transaction's message."""
    via, send = m.send.get("via"), m.send
    if send.get("txn") is not None:
        return False
    if via == "gateway":
        faults = stalls.gateways + (stalls.brokers if send["topic"] in stalls.strict else [])
    elif via == "sdk" and send.get("key") is None:
        faults = stalls.brokers
    else:
        return False
    acked = m.ack["ret"] if m.ack is not None else float("inf")
    return any(send["call"] <= at <= acked for at in faults)


def _written_twice(first: dict[str, Any], again: dict[str, Any]) -> str:
    if (first["partition"], first["offset"]) == (again["partition"], again["offset"]):
        return ""
    return f", written twice: at {first['partition']}/{first['offset']} and {again['partition']}/{again['offset']}"


def _moved(first: dict[str, Any], again: dict[str, Any], ends: dict[tuple[str, str], dict[str, Any]],
           left: dict[tuple[str, str, str, int], list[float]]) -> bool:  # fmt: skip
    """Whether ``first``'s reader lost its partition (a revocation, or its end) before ``again``."""
    end = ends.get((first["group"], first["member"]))
    if end is not None and first["at"] <= end["at"] <= again["at"]:
        return True
    revoked = left[(first["group"], first["member"], first["topic"], first["partition"])]
    return any(first["at"] <= at <= again["at"] for at in revoked)


def _excused(first: dict[str, Any], again: dict[str, Any], ends: dict[tuple[str, str], dict[str, Any]],
             commits: dict[tuple[str, str, str, int], list[dict[str, Any]]]) -> bool:  # fmt: skip
    """Whether ``first``'s reader ended by a kill or an expired session, before ``again``, without an
    acknowledged commit past the record (all its commits came before its end)."""
    end = ends.get((first["group"], first["member"]))
    if end is None or end["how"] == GRACEFUL or end["at"] > again["at"]:
        return False
    committed = [c["offset"] for c in commits[(first["group"], first["member"], first["topic"], first["partition"])]]
    return not committed or max(committed) <= first["offset"]


def _key_order(messages: dict[str, _Message], strict: set[str], groups: dict[str, dict[str, str]],
               seals: dict[tuple[str, int], int], summary: Summary) -> list[Anomaly]:  # fmt: skip
    """Per group and key of a strict topic, the first reads follow the producer's sequence, but for a late
    write: a message at or past the seal of its partition (written after the epoch that routed it ended,
    which consumers deliver as it comes, flagged ``late_write``: ``docs/KEY_ORDER.md``)."""
    out = []
    firsts: dict[tuple[str, str, Any], list[tuple[float, int, _Message]]] = defaultdict(list)
    for m in messages.values():
        topic, key, seq = m.send["topic"], m.send.get("key"), m.send.get("seq")
        if topic not in strict or seq is None:  # a keyed message's sequence within its key
            continue
        for group, reads in m.reads.items():
            if topic in groups.get(group, {}):
                firsts[(group, topic, key)].append((reads[0]["at"], seq, m))
    for (group, topic, key), seen in firsts.items():
        seen.sort(key=lambda first: first[:2])
        highest = None
        for _, seq, m in seen:
            if highest is None or seq > highest:
                highest = seq
            elif _late(m, seals):
                summary.late_writes += 1
            else:
                out.append(Anomaly("key-order", f"group {group} read {m.send['id']!r} (seq {seq}) of key {key!r} "
                                   f"on {topic} after seq {highest}"))  # fmt: skip
                break
    return out


def _late(m: _Message, seals: dict[tuple[str, int], int]) -> bool:
    """Whether ``m`` was acknowledged at or past a seal of its partition (an acknowledgement without a
    position names no partition either)."""
    if m.outcome != "ok":
        return False
    seal = seals.get((m.send["topic"], m.ack["partition"]))  # type: ignore[index]
    return seal is not None and m.ack["offset"] >= seal  # type: ignore[index]


def _offsets(ops: Sequence[dict[str, Any]], strict: set[str]) -> list[Anomaly]:
    """Per member and partition of a ``none`` topic, while it holds it (from ``assign`` to ``revoke`` or its
    end), offsets read only increase."""
    out = []
    last: dict[tuple[str, str, str, int], int] = {}
    for op in ops:
        key = (op.get("group"), op.get("member"), op.get("topic"), op.get("partition"))
        if op["op"] in ("assign", "revoke"):
            last.pop(key, None)  # type: ignore[arg-type]
        elif op["op"] == "read" and op["topic"] not in strict:
            before = last.get(key)  # type: ignore[arg-type]
            if before is not None and op["offset"] <= before:
                out.append(Anomaly("offset-backwards", f"{_member(op)} read {op['topic']}/{op['partition']} at "
                                   f"{op['offset']} after {before}"))  # fmt: skip
            last[key] = op["offset"]  # type: ignore[index]
    return out
