"""Strict key order on the local federation (docs/KEY_ORDER.md): a topic created strict from the CLI,
its routing epochs started by planned changes (in their batch) and by the leader's loop (an expand, once the
new partitions have leaders), and the seal points the agents measure after the grace."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from deploy.launcher import LocalFederation, kfed_command
from metadata_log.keymap import slot_of
from sdk import FederatedConsumer, FederatedProducer
from tests.waiting import wait_until

from .conftest import KeyedReader, controllers

pytestmark = pytest.mark.slow


def kfed(fed: LocalFederation, *args: str) -> str:
    command = kfed_command(*args, "--controller", controllers(fed), *fed.quorum.token_args)
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


def topic(fed: LocalFederation, name: str) -> dict[str, Any]:
    return dict(fed.metadata(topic=name)["topics"][0])


def owner(key_ranges: list[list[int]], key: bytes) -> int:
    slot = slot_of(key)
    return next(p for first, end, p in key_ranges if first <= slot < end)


def produce_keyed(fed: LocalFederation, name: str, keys: list[bytes], round_: str) -> list[tuple[bytes, int, Any]]:
    """Produce one message per key and a key-less one, valued ``round_``; (key, logical partition, headers)
    of each, as a group member reads them back."""
    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2}) as p:
        for key in keys:
            p.produce(name, round_.encode(), key=key)
        p.produce(name, round_.encode())
        assert p.flush(60) == 0
    read: list[tuple[bytes, int, Any]] = []
    with FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": f"g-{round_}",
                            "auto.offset.reset": "earliest"}) as consumer:  # fmt: skip
        consumer.subscribe([name])

        def all_read() -> bool:
            for m in consumer.consume(500, 0.2):
                if m.error() is None and m.value() == round_.encode():
                    read.append((m.key(), m.partition(), m.headers()))
            return len(read) >= len(keys) + 1

        wait_until(all_read, 60, f"the messages of {round_} read back")
    return read


@pytest.mark.brokers("tansu")
def test_a_strict_topics_epochs_follow_expand_and_shrink_and_the_agents_seal_them(fed: LocalFederation) -> None:
    out = kfed(fed, "topic", "create", "K", "--region", "r1", "--partitions-per-cluster", "2", "--key-order", "strict")
    assert "key order strict" in out
    first = topic(fed, "K")
    assert (first["key_order"], first["key_epoch"]) == ("strict", 1)
    assert sorted({p for _, _, p in first["key_ranges"]}) == [0, 1, 2, 3]
    fed.wait_writable("K")
    keys = [f"key-{i}".encode() for i in range(300)]
    for key, partition, headers in produce_keyed(fed, "K", keys, "epoch-1"):
        if key is None:
            assert not headers, "a key-less message is not stamped"
            continue
        assert partition == owner(first["key_ranges"], key), "a key goes where its epoch maps its slot"
        assert not headers, "no slot has moved yet: nothing is stamped (docs/KEY_ORDER.md, decision 3)"

    # expand: the leader's loop starts the epoch once P4 and P5 have leaders
    # (in a physical topic of their own: Tansu cannot add partitions to K)
    kfed(fed, "topic", "expand", "K", "--cluster", "c1", "--partitions", "4", "--physical-topic", "K-more")
    expanded = wait_until(lambda: (t := topic(fed, "K"))["key_epoch"] == 2 and t, 30, "the expand's epoch")
    assert sorted({p for _, _, p in expanded["key_ranges"]}) == [0, 1, 2, 3, 4, 5]
    assert expanded["key_epoch_cause"] == "writable partitions changed"
    assert expanded["pending_seals"], "the partitions that gave keys to P4 and P5 are to be sealed"
    sealed = wait_until(lambda: not (t := topic(fed, "K"))["pending_seals"] and t, 30, "the agents' seals")
    after = produce_keyed(fed, "K", keys, "epoch-2")
    assert {p for k, p, _ in after if k is not None} == {0, 1, 2, 3, 4, 5}, "the new partitions take keyed traffic"
    assert all(p == owner(expanded["key_ranges"], k) for k, p, _ in after if k)
    moved = {k for k, _, _ in after if k and owner(first["key_ranges"], k) != owner(expanded["key_ranges"], k)}
    assert moved and len(moved) < len(keys), "the expand moved some keys, not all"
    for key, _, headers in after:
        if key is not None:  # the keys that moved carry the epoch they were routed by; the others nothing
            assert headers == ([("kfed-epoch", b"2")] if key in moved else None), (key, headers)
    assert {s["epoch"] for s in sealed["seals"]} == {2}
    assert {s["partition"] for s in sealed["seals"]} == set(expanded["pending_seals"])

    # shrink: the epoch is in the shrink's own batch
    kfed(fed, "topic", "shrink", "K", "--partitions", "5", "--no-wait")
    shrunk = topic(fed, "K")
    assert shrunk["key_epoch"] == 3 and shrunk["key_epoch_cause"] == "K shrunk"
    assert 5 not in {p for _, _, p in shrunk["key_ranges"]} and shrunk["pending_seals"] == [5]
    wait_until(lambda: not topic(fed, "K")["pending_seals"], 30, "P5's seal")
    status = kfed(fed, "topic", "status", "K")
    assert "key order strict: epoch 3 (K shrunk)" in status and "seals pending: none" in status

    # an operator switches it back to none, and strict again: epochs go on from where they were
    assert "key order none" in kfed(fed, "topic", "key-order", "K", "none")
    assert topic(fed, "K")["key_order"] == "none"
    assert "epoch 4" in kfed(fed, "topic", "key-order", "K", "strict")


@pytest.mark.brokers("tansu")
def test_per_key_order_holds_across_an_expand_and_a_shrink_while_producing(fed: LocalFederation) -> None:
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": "O", "region": "r1", "partitions_per_cluster": 2, "key_order": "strict"})
    fed.wait_writable("O")
    delivered: list[tuple[str, int]] = []  # in the order the group handed them out (appends are atomic)
    keys = [f"k{i}" for i in range(200)]
    sent = dict.fromkeys(keys, 0)
    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2})

    def produce_rounds(rounds: int) -> None:
        for _ in range(rounds):
            for key in keys:
                producer.produce("O", f"{key}:{sent[key]}".encode(), key=key.encode())
                sent[key] += 1
            producer.poll(0)
            time.sleep(0.02)

    produce_rounds(20)
    kfed(fed, "topic", "expand", "O", "--cluster", "c1", "--partitions", "4", "--physical-topic", "O-more")
    deadline = time.monotonic() + 30
    while topic(fed, "O")["key_epoch"] < 2:
        assert time.monotonic() < deadline, "the expand's epoch did not start"
        produce_rounds(2)
    produce_rounds(30)
    kfed(fed, "topic", "shrink", "O", "--partitions", "1", "--no-wait")
    produce_rounds(30)
    assert producer.flush(60) == 0
    producer.close()
    # The group starts on the backlog: the partitions a key moved to are read side by side with those it left,
    # so without the hold-back its records would come out of order.
    readers = [KeyedReader(fed, "O", "g-order", delivered, **{"kfed.key.order.max.held": 200}) for _ in range(2)]
    for r in readers:
        r.start()
    total = sum(sent.values())
    wait_until(lambda: len(set(delivered)) >= total, 120, f"the group read all {total} keyed messages")
    for r in readers:
        r.stop_flag.set()
    for r in readers:
        r.join(30)
    # A rebalance makes a partition's next owner read again from the group's committed offset, which a member
    # holding records back keeps at its first held record: records after it are handed out again (Kafka's
    # at-least-once). Order is about first deliveries: for every key, 0, 1, 2, ... with no gap.
    first: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for key, seq in delivered:
        if (key, seq) not in seen:
            seen.add((key, seq))
            first.setdefault(key, []).append(seq)
    out_of_order = {k: s for k, s in first.items() if s != list(range(sent[k]))}
    assert set(first) == set(keys)
    assert not out_of_order, (
        f"{len(out_of_order)} keys out of order or with gaps, e.g. {list(out_of_order.items())[:1]}"
    )
    assert not [b for r in readers for b in r.breaks], "no order break in a run without failures"
    held = [s for r in readers for s in r.consumer.key_order_stats().values()]
    assert sum(s["held_total"] for s in held) > 0, "moved keys were held back: the test exercised the rule"
    print(f"key order: {len(delivered) - len(seen)} records handed out again after rebalances; {held}")


@pytest.mark.brokers("tansu")
def test_a_fenced_parent_is_given_up_after_max_wait_and_the_break_is_reported(fed: LocalFederation) -> None:
    """The unplanned policy (docs/KEY_ORDER.md decision 5): c2's broker dies, the fence moves its keys to c1 at
    once; the records of those keys wait for c2's partitions, which cannot be read to a seal, for
    kfed.key.order.max.wait.ms; then the group gives them up (a broken release in the log) and delivers
    them flagged, through on_order_break."""
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": "F", "region": "r1", "partitions_per_cluster": 2, "key_order": "strict"})
    fed.wait_writable("F")
    acked: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value().decode())

    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2, "message.timeout.ms": 5000,
                                  "on_delivery": report})  # fmt: skip
    keys = [f"k{i}" for i in range(100)]
    for key in keys:
        producer.produce("F", f"{key}:before".encode(), key=key.encode())
    assert producer.flush(30) == 0
    fed.clusters["c2"].kill_broker()
    wait_until(lambda: topic(fed, "F")["key_epoch"] == 2, 30, "the fence's epoch")
    assert {p for _, _, p in topic(fed, "F")["key_ranges"]} == {0, 1}, "c2's keys moved to c1"
    after = len(acked)
    for key in keys:
        producer.produce("F", f"{key}:after".encode(), key=key.encode())
    producer.flush(30)
    producer.close()
    on_c1_after = set(acked[after:])
    assert len(on_c1_after) == len(keys), "every key went to c1 after the fence"
    breaks: list[Any] = []
    consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": "g-fenced",
                                  "auto.offset.reset": "earliest", "kfed.key.order.max.wait.ms": 3000,
                                  "on_order_break": lambda c, b: breaks.append(b)})  # fmt: skip
    consumer.subscribe(["F"])
    got: set[str] = set()

    def read_everything_after() -> bool:
        got.update(m.value().decode() for m in consumer.consume(500, 0.2) if m.error() is None)
        return on_c1_after <= got

    wait_until(read_everything_after, 90, "the held records were given up and delivered")
    stats = consumer.key_order_stats()["F"]
    consumer.close()
    assert breaks and {b.kind for b in breaks} == {"gave_up"} and {b.epoch for b in breaks} == {2}
    assert stats["breaks"]["gave_up"] == len([b for b in breaks if b.kind == "gave_up"])
    releases = topic(fed, "F")["releases"]
    assert releases and all(r["broken"] and r["group"] == "g-fenced" for r in releases)
