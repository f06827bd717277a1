"""Issue 27's end-to-end test: per-key order across an expand onto a third sub-cluster, a shrink of two
partitions and a decommission, while two producer processes write 1,000 keys; and the same on a ``none``
topic, whose moved keys nothing orders (it prints how many came out of order: a quarter to a half of the
keys in most runs, none in a run where the group's fetchers of the new partitions started late).

Each producer process owns 500 keys and writes ``<key>:<sequence number>`` round after round (one producer
per key: two producers of one key have no order between them to keep). A group of three FederatedConsumers
then reads the topic from its start, with every partition's backlog in front of it, so the partitions a key
moved to are read side by side with the ones it left: without the hold-back, a key's later records come out
before its earlier ones. The check is on first deliveries (a rebalance hands out again what follows a held
record, Kafka's at-least-once): for every key 0, 1, 2, ... with no gap, and nothing acknowledged is missing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer

from deploy.launcher import LocalFederation, free_ports, kfed_command
from deploy.processes import stop_processes, wait_port
from gateway.cli import spawn
from tests.physical import physical_records
from tests.waiting import wait_until

from .conftest import KeyedReader, controllers

pytestmark = pytest.mark.slow

KEYS = 1000
REPO = Path(__file__).resolve().parents[2]


def kfed(fed: LocalFederation, *args: str) -> str:
    command = kfed_command(*args, "--controller", controllers(fed), *fed.quorum.token_args)
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


class GatewayReader(threading.Thread):
    """A member of a reading group made of kafka-python consumers, unmodified, reading through ``kfed gateway``:
    appends (key, sequence) as handed out to a list the group shares, as ``KeyedReader`` does."""

    def __init__(self, gateways: list[str], topic: str, group: str, delivered: list[tuple[str, int]]) -> None:
        super().__init__(daemon=True)
        # small fetches: the partitions a key moved to are read side by side with the ones it left (one fetch
        # of a whole partition would hand it out before the next, in order by chance)
        self.consumer = KafkaConsumer(topic, bootstrap_servers=gateways, group_id=group,
                                      auto_offset_reset="earliest", auto_commit_interval_ms=1000,
                                      max_partition_fetch_bytes=4096)  # fmt: skip
        self.delivered = delivered
        self.breaks: list[Any] = []  # a Kafka client is told of none: the hold-back must leave none to tell
        self.partitions: dict[str, set[int]] = {}
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for tp, messages in self.consumer.poll(100).items():
                for m in messages:
                    key, seq = m.value.decode().split(":")
                    self.delivered.append((key, int(seq)))
                    self.partitions.setdefault(key, set()).add(tp.partition)
        self.consumer.close()


def resize_while_producing(
    fed: LocalFederation, tmp_path: Path, topic: str, key_order: str, gateway: str | None = None,
    read_through: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Produce from two processes while the topic is expanded onto c3, shrunk by two partitions and c1 is
    decommissioned; then read it with a group of three. Returns what was sent and what was delivered.
    ``gateway``: the producers are kafka-python processes writing through this gateway (HOST:PORT);
    ``read_through``: the group's members are kafka-python consumers reading through these gateways."""
    kfed(fed, "topic", "create", topic, "--region", "r1", "--partitions-per-cluster", "2", "--key-order", key_order)
    fed.wait_writable(topic)
    stop = tmp_path / f"{topic}.stop"
    reports = [tmp_path / f"{topic}-{i}.json" for i in range(2)]
    producers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.keyed_producer",
                "gateway" if gateway else "sdk",
                gateway or controllers(fed),
                topic,
                str(i * KEYS // 2),
                str((i + 1) * KEYS // 2),
                str(stop),
                str(reports[i]),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"{topic}-producer-{i}.log").open("w"),
        )
        for i in range(2)
    ]
    try:
        time.sleep(3)
        kfed(fed, "topic", "expand", topic, "--cluster", "c3", "--partitions", "2")
        time.sleep(4)  # the expand's epoch (leaders known, then the leader's loop) and its seals
        kfed(fed, "topic", "shrink", topic, "--partitions", "0", "2", "--no-wait")
        time.sleep(4)
        kfed(fed, "cluster", "decommission", "c1", "--no-wait")
        time.sleep(4)
    finally:
        stop.touch()
        try:
            for p in producers:
                p.wait(180)
        finally:  # a producer stuck flushing is not left behind
            stop_processes(producers)
    sent: dict[str, int] = {}
    for report in reports:
        body = json.loads(report.read_text())
        assert body["failed"] == [] and body["remaining"] == 0, body
        sent.update(body["sent"])
    delivered: list[tuple[str, int]] = []
    readers: list[KeyedReader | GatewayReader] = [
        GatewayReader(read_through, topic, f"g-{topic}", delivered)
        if read_through
        else KeyedReader(fed, topic, f"g-{topic}", delivered)
        for _ in range(3)
    ]
    total = sum(sent.values())
    with readers_logged(tmp_path / f"{topic}-readers.log"):
        for r in readers:
            r.start()
        try:
            wait_until(lambda: len(set(delivered)) >= total, 300, f"the group read all {total} messages of {topic}")
        except AssertionError as e:
            raise AssertionError(f"{e}; {missing(fed, topic, sent, delivered, readers)}") from None
        finally:  # also after a failure: members left polling would run on into the tests after this one
            for r in readers:
                r.stop_flag.set()
            for r in readers:
                r.join(30)
    history = fed.metadata(topic=topic)["topics"][0]
    return {"sent": sent, "delivered": delivered, "readers": readers, "topic": history}


@contextlib.contextmanager
def readers_logged(path: Path) -> Iterator[None]:
    """The reading group's own account, in the test's directory: each SDK member's partitions started,
    released and assigned again (``sdk`` at INFO), and the warnings of kafka-python's consumers."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s"))
    levels = {"sdk": logging.INFO, "kafka": logging.WARNING}
    loggers = {name: logging.getLogger(name) for name in levels}
    before = {name: logger.level for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.setLevel(levels[name])
        logger.addHandler(handler)
    try:
        yield
    finally:
        for name, logger in loggers.items():
            logger.removeHandler(handler)
            logger.setLevel(before[name])
        handler.close()


def missing(fed: LocalFederation, topic: str, sent: dict[str, int], delivered: list[tuple[str, int]],
            readers: list[KeyedReader | GatewayReader]) -> str:  # fmt: skip
    """What a group that did not read everything lacks: how many messages of how many keys, where the first
    gaps are, where the physical partitions hold them (written, or not), and what its members hold back."""
    got: dict[str, set[int]] = {}
    for key, seq in list(delivered):
        got.setdefault(key, set()).add(seq)
    short = {k: sorted(set(range(n)) - got.get(k, set())) for k, n in sent.items()}
    short = {k: gap for k, gap in short.items() if gap}
    examples = {k: (gap[0], len(gap)) for k, gap in list(short.items())[:5]}
    stats = [(r.consumer.key_order_stats(), sorted(r.consumer._paused)) for r in readers if isinstance(r, KeyedReader)]
    lacking = {f"{k}:{seq}".encode() for k, gap in short.items() for seq in gap}
    return (f"{sum(map(len, short.values()))} messages of {len(short)} keys missing; (first missing, how many): "
            f"{examples}; {physical_copies(fed, topic, lacking)}; members' key-order stats and paused partitions: "
            f"{stats}")  # fmt: skip


def physical_copies(fed: LocalFederation, topic: str, values: set[bytes]) -> str:
    """Where the physical topic ``topic`` holds records of these values on each sub-cluster (a decommissioned
    one too), read straight from its brokers: (cluster, physical partition, offset) of the first few, and how
    many are on none: never written, or on a cluster whose topic was deleted since (named); and the reading
    group's committed offsets there and the earliest offset each broker lists."""
    found: dict[bytes, tuple[str, int, int]] = {}
    deleted = []
    offsets: dict[str, list[tuple[int, int, int]]] = {}  # (partition, the group's committed offset, earliest)
    try:
        for cluster_id, cluster in fed.clusters.items():
            records = physical_records(cluster.bootstrap, topic)
            if records is None:
                deleted.append(cluster_id)
                continue
            for partition, offset, value in records:
                if value in values:
                    found.setdefault(value, (cluster_id, partition, offset))
            offsets[cluster_id] = group_offsets(cluster.bootstrap, f"g-{topic}", topic, {p for p, _, _ in records})
    except Exception as e:  # a diagnosis only: the failure it explains is raised anyway
        return f"the physical partitions could not be read: {e!r}"
    first = sorted(found.items(), key=lambda item: item[1])[:8]
    return (
        f"{len(found)} of the {len(values)} missing are in the physical partitions (e.g. "
        f"{[(v, *at) for v, at in first]}), {len(values) - len(found)} in none; topic deleted on "
        f"{deleted or 'no cluster'}; (partition, the group's committed offset, earliest offset): {offsets}"
    )


def group_offsets(bootstrap: str, group: str, topic: str, partitions: set[int]) -> list[tuple[int, int, int]]:
    """(partition, ``group``'s committed offset, the earliest offset the broker lists) of each partition; read
    only (nothing is committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in sorted(partitions)], 10)
        return [(tp.partition, tp.offset, consumer.get_watermark_offsets(tp, 10)[0]) for tp in committed]
    finally:
        consumer.close()


def first_deliveries(delivered: list[tuple[str, int]]) -> dict[str, list[int]]:
    first: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for key, seq in delivered:
        if (key, seq) not in seen:
            seen.add((key, seq))
            first.setdefault(key, []).append(seq)
    return first


def assert_every_key_in_order(strict: dict[str, Any], label: str) -> None:
    """What ``resize_while_producing`` gave on a strict topic: every key's first deliveries 0, 1, 2, ... with no
    gap and no order break; prints how many and how long the longest hold-back was."""
    # P0, P1 on c1 (decommissioned), P2, P3 on c2 (P0, P2 shrunk), P4, P5 on c3 (the expand). Changes that come
    # while the latest epoch waits for its seals are made by one later epoch: at least two epochs after the first.
    assert {p for _, _, p in strict["topic"]["key_ranges"]} == {3, 4, 5}
    assert strict["topic"]["key_epoch"] >= 3
    first = first_deliveries(strict["delivered"])
    assert set(first) == {f"k{i}" for i in range(KEYS)}
    lost = {k: strict["sent"][k] - len(s) for k, s in first.items() if len(s) != strict["sent"][k]}
    assert not lost, f"acknowledged messages never consumed: {list(lost.items())[:5]}"
    out_of_order = [k for k, s in first.items() if s != list(range(strict["sent"][k]))]
    assert not out_of_order, f"{len(out_of_order)} keys out of order ({label}), e.g. {out_of_order[:5]}"
    assert not [b for r in strict["readers"] for b in r.breaks], "no order break without a failure"
    stats = [s for r in strict["readers"] if isinstance(r, KeyedReader) for s in r.consumer.key_order_stats().values()]
    held = (f"longest hold-back {max(s['longest_hold_ms'] for s in stats)} ms; held "
            f"{sum(s['held_total'] for s in stats)}" if stats else "read by Kafka clients")  # fmt: skip
    print(f"{label}: {sum(strict['sent'].values())} messages of {KEYS} keys in order; epochs "
          f"{strict['topic']['key_epoch']}; {held}")  # fmt: skip


@pytest.mark.brokers("tansu")
def test_strict_key_order_survives_expand_shrink_and_decommission_while_none_spreads_keys_over_partitions(
    fed: LocalFederation, tmp_path: Path
) -> None:
    fed.add_cluster("c3", "r1")
    fed.wait_clusters_healthy()
    strict = resize_while_producing(fed, tmp_path, "Strict", "strict")
    assert_every_key_in_order(strict, "strict")

    none = resize_while_producing(fed, tmp_path, "Unordered", "none")
    reordered = [k for k, s in first_deliveries(none["delivered"]).items() if s != sorted(s)]
    partitions_of: dict[str, set[int]] = {}
    for r in none["readers"]:
        for k, ps in r.partitions.items():
            partitions_of.setdefault(k, set()).update(ps)
    moved = {k for k, ps in partitions_of.items() if len(ps) > 1}
    print(f"none: {len(reordered)} of {KEYS} keys delivered out of order; {len(moved)} keys written to more than "
          "one partition")  # fmt: skip
    # Whether a moved key comes out of order depends on how the group's reads of its old and new partitions
    # interleave (seen 249-498 of 1,000 in most runs; none in a run where the new partitions' fetchers
    # started late): every key written to two partitions is exposed, and nothing orders them.
    assert len(moved) > KEYS // 4, "the resizes moved keys of the none topic"


@pytest.mark.brokers("tansu")
@pytest.mark.parametrize("readers", ["sdk", "gateway", "two-gateways"])
def test_strict_key_order_holds_for_unmodified_kafka_clients_through_the_gateway(
    fed: LocalFederation, tmp_path: Path, readers: str
) -> None:
    """The same resizes, the keys written by kafka-python through ``kfed gateway``, which places and stamps
    them (``gateway/README.md``); read by a group of FederatedConsumers, or of kafka-python consumers through
    the gateway, which ends each fetch of a strict partition before the first record the group must not have
    yet (``gateway/holdback.py``). With two instances, a member fetches the partitions the other one leads
    from it, though it joined and commits through its coordinator: the hold-back goes by the log. Every
    group gets every key in order."""
    fed.add_cluster("c3", "r1")
    fed.wait_clusters_healthy()
    ports = free_ports(2 if readers == "two-gateways" else 1)
    token = ["--token-file", str(fed.quorum.token_file)] if fed.quorum.token_file else []
    with open(tmp_path / "gateway.log", "ab") as log:
        gateways = [spawn(fed.quorum.urls, f"127.0.0.1:{port}", log, *token) for port in ports]
    addresses = [f"127.0.0.1:{port}" for port in ports]
    try:
        for port in ports:
            wait_port(port, 30)
        strict = resize_while_producing(fed, tmp_path, "ViaGateway", "strict", gateway=addresses[0],
                                        read_through=addresses if readers != "sdk" else None)  # fmt: skip
    finally:
        stop_processes(gateways)
    assert_every_key_in_order(strict, f"written through the gateway, read by {readers}")
