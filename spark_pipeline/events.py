"""The message format the warehouse jobs expect, and a producer of demo data (with its audit records).

An **event** is a Kafka message whose value is a UTF-8 JSON object::

    {"id": "demo-000000042", "producer": "demo", "seq": 42, "event_time_ms": 1795306703831,
     "type": "click", "user_id": "u17", "amount": 12.5}

``id`` is unique per message (``<producer>-<seq>``, so a resent message keeps its id and is deduplicated);
``event_time_ms`` is when it happened (epoch ms, UTC); ``type`` is one of ``EVENT_TYPES``; ``amount`` may be
0. The key is the ``user_id`` (a user's events stay in one partition while the partition set is stable).

An **audit record** (the Kafka paper's audit, one per producer and time window, in an audit topic) says how
many distinct events a producer sent per window of event time::

    {"producer": "demo", "topic": "U_TopicA", "window_start_ms": 1795306680000, "window_ms": 60000, "count": 981}

The audit job compares these counts with the distinct ids that arrived in the topic; a non-zero
difference is loss (or an unexpected surplus). No pyspark here: the SDK producer is all it needs.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from metadata_client.access import NO_ACCESS, Access
from metadata_client.client import ControllerClient
from metadata_log.errors import Conflict, NotFound
from sdk import FederatedProducer

EVENT_TYPES: Final = ("view", "click", "cart", "purchase")
AUDIT_WINDOW_MS: Final = 60_000
DEFAULT_SPAN_MS: Final = 5 * 60_000


@dataclass(frozen=True, slots=True)
class Produced:
    """What ``produce_events`` did: events sent (resends included), distinct events meant, the ones dropped."""

    sent: int
    distinct: int
    dropped: int
    audit_records: int
    first_event_time_ms: int


def event(producer: str, seq: int, event_time_ms: int, rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(EVENT_TYPES)
    amount = round(rng.uniform(1, 200), 2) if kind == "purchase" else 0.0
    return {
        "id": f"{producer}-{seq:09d}",
        "producer": producer,
        "seq": seq,
        "event_time_ms": event_time_ms,
        "type": kind,
        "user_id": f"u{rng.randrange(1000)}",
        "amount": amount,
    }


def ensure_topic(
    controllers: Sequence[str] | str,
    topic: str,
    region: str = "r1",
    partitions_per_cluster: int = 1,
    timeout_s: float = 30.0,
    access: Access = NO_ACCESS,
) -> None:
    """Create the logical topic if it does not exist and wait until every partition takes writes
    (``access``: the admin token when the controllers require one)."""
    with ControllerClient(controllers, access=access) as client:
        body = {"name": topic, "region": region, "partitions_per_cluster": partitions_per_cluster}
        with contextlib.suppress(Conflict):  # it exists already
            client.post("/v1/topics", body)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                parts = client.topic(topic)["partitions"]
            except NotFound:  # a follower that has not applied the creation yet
                parts = []
            if parts and all(p["writable"] and p["leader"] for p in parts if p["state"] == "writable"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} not writable after {timeout_s} s: {parts}")
            time.sleep(0.1)


def produce_events(
    controllers: Sequence[str] | str,
    topic: str,
    count: int,
    *,
    producer_id: str = "demo",
    first_seq: int = 0,
    start_ms: int | None = None,
    span_ms: int = DEFAULT_SPAN_MS,
    audit_topic: str | None = None,
    drop: Collection[int] = (),
    resend_every: int = 0,
    seed: int = 1,
    access: Access = NO_ACCESS,
) -> Produced:
    """Send ``count`` events (seqs ``first_seq..``) spread evenly over ``span_ms`` of event time.

    ``audit_topic``: also send one audit record per window with the distinct events of that window.
    ``drop``: seqs counted in the audit but never sent (a deliberate loss for the audit to find).
    ``resend_every``: send every n-th event twice (a duplicate the DWD layer removes). Raises when a
    message could not be delivered: the counts returned are exactly what the clusters acknowledged.
    """
    rng = random.Random(seed)
    start = int(time.time() * 1000) - span_ms if start_ms is None else start_ms
    windows: Counter[int] = Counter()
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = dropped = 0
    config = {"kfed.controllers": controllers, "linger.ms": 5, "on_delivery": report, "enable.idempotence": False}
    if access.token:
        config["kfed.token"] = access.token
    if access.ca_file:
        config["kfed.ssl.ca.location"] = access.ca_file
    with FederatedProducer(config) as producer:
        for i in range(count):
            seq = first_seq + i
            e = event(producer_id, seq, start + (i * span_ms) // max(1, count), rng)
            windows[e["event_time_ms"] // AUDIT_WINDOW_MS * AUDIT_WINDOW_MS] += 1
            if seq in drop:
                dropped += 1
                continue
            value = json.dumps(e, separators=(",", ":")).encode()
            copies = 2 if resend_every and seq % resend_every == 0 else 1
            for _ in range(copies):
                producer.produce(topic, value=value, key=e["user_id"].encode())
                sent += 1
            if sent % 5000 < copies:
                producer.poll(0)
        if audit_topic is not None:
            for window_start, n in sorted(windows.items()):
                record = {
                    "producer": producer_id,
                    "topic": topic,
                    "window_start_ms": window_start,
                    "window_ms": AUDIT_WINDOW_MS,
                    "count": n,
                }
                producer.produce(audit_topic, value=json.dumps(record).encode(), key=producer_id.encode())
        left = producer.flush(60)
    if left or failures:
        raise RuntimeError(f"{left} messages not delivered, {len(failures)} failed: {failures[:3]}")
    return Produced(sent, count, dropped, len(windows) if audit_topic else 0, start)
