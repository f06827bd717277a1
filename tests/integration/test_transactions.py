"""Transactions across sub-clusters on the local federation: a real quorum, two Apache Kafka sub-clusters
(c1 holds U_TopicA's P0-P3, c2 P4-P7), real agents; read_committed consumers are ``FederatedConsumer``s."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from deploy.launcher import LocalFederation
from sdk import FederatedConsumer, FederatedProducer
from tests.waiting import wait_until

from .conftest import TOPIC, controllers, partitions

pytestmark = pytest.mark.slow

PARTITIONS = 8  # U_TopicA: P0-P3 on c1, P4-P7 on c2


def txn_producer(fed: LocalFederation, tid: str, **extra: Any) -> FederatedProducer:
    return FederatedProducer({"kfed.controllers": controllers(fed), "transactional.id": tid, "linger.ms": 5,
                              **extra})  # fmt: skip


def write(p: FederatedProducer, label: str, n: int = PARTITIONS) -> set[str]:
    """``n`` messages of one transaction, one per partition: on both clusters."""
    values = {f"{label}-{i}" for i in range(n)}
    for i in range(n):
        p.produce(TOPIC, value=f"{label}-{i}".encode(), partition=i % PARTITIONS)
    return values


def committed_by_another(fed: LocalFederation, tid: str) -> set[str]:
    """One committed transaction of a producer of its own (``write``'s ``kept`` messages): what a reader must get."""
    with txn_producer(fed, tid) as p:
        p.init_transactions(60)
        p.begin_transaction()
        kept = write(p, "kept")
        p.commit_transaction(60)
    return kept


def read_committed(fed: LocalFederation, until: set[str], timeout_s: float = 60.0) -> set[str]:
    """Every value a read_committed group member reads, once it has read ``until`` (and a little more)."""
    consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": f"check-{random.random()}",
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                  "enable.auto.commit": False})  # fmt: skip
    seen: set[str] = set()
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + timeout_s
    try:
        while not until <= seen and time.monotonic() < deadline:
            seen |= {m.value().decode() for m in consumer.consume(1000, 0.2)}
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            seen |= {m.value().decode() for m in consumer.consume(1000, 0.2)}
    finally:
        consumer.close()
    return seen


def test_transactions_over_two_clusters_are_all_or_nothing_to_read_committed(fed) -> None:
    rng = random.Random(28)
    committed: set[str] = set()
    aborted: set[str] = set()
    with txn_producer(fed, "tx-atomic") as p:
        p.init_transactions(60)
        for t in range(12):
            p.begin_transaction()
            values = write(p, f"t{t}")
            if rng.random() < 0.4:
                p.abort_transaction(60)
                aborted |= values
            else:
                p.commit_transaction(60)
                committed |= values
        p.begin_transaction()
        last = write(p, "last")
        p.commit_transaction(60)
        with pytest.raises(KafkaException) as outside:
            p.produce(TOPIC, value=b"outside", partition=0)
        assert outside.value.args[0].code() == KafkaError._STATE
    seen = read_committed(fed, committed | last)
    assert committed | last <= seen, f"missing: {sorted(committed | last - seen)[:10]}"
    assert not seen & aborted, f"aborted but read: {sorted(seen & aborted)[:10]}"


def test_a_message_that_fails_before_the_commit_aborts_the_whole_transaction(fed) -> None:
    """``docs/TRANSACTIONS.md``: the flush fails, the transaction aborts. One message too large for its
    physical topic on c2 (the broker refuses it) fails the commit before any decision, with
    ``txn_requires_abort``; the abort that follows leaves no message of the transaction readable, on c1 either."""
    on_c2 = next(p for p in partitions(fed) if p["cluster_id"] == "c2")
    admin = AdminClient({"bootstrap.servers": fed.clusters["c2"].bootstrap, "log_level": 3})
    small = ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET)
    limit = ConfigResource(ConfigResource.Type.TOPIC, on_c2["physical_topic"], incremental_configs=[small])
    admin.incremental_alter_configs([limit])[limit].result(30)
    try:
        with txn_producer(fed, "tx-failed-delivery") as p:
            p.init_transactions(60)
            p.begin_transaction()
            lost = write(p, "lost")
            p.produce(TOPIC, value=b"x" * 8192, partition=on_c2["partition"])
            with pytest.raises(KafkaException) as refused:
                p.commit_transaction(60)
            assert refused.value.args[0].txn_requires_abort(), refused.value
            p.abort_transaction(60)
    finally:
        unset = ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)
        limit = ConfigResource(ConfigResource.Type.TOPIC, on_c2["physical_topic"], incremental_configs=[unset])
        admin.incremental_alter_configs([limit])[limit].result(30)
    # another producer: the failed one's next transaction fails too (its epoch is being bumped), as plain
    # librdkafka's does
    kept = committed_by_another(fed, "tx-after-the-failed-one")
    seen = read_committed(fed, kept)
    assert kept <= seen
    assert not seen & lost, f"a message of the aborted transaction was read: {sorted(seen & lost)}"


def test_after_a_commit_whose_outcome_is_unknown_nothing_joins_the_transaction_and_the_retry_commits_it(
    fed, monkeypatch
) -> None:
    """The decision's reply is lost (the commit is in the log): until the application retries the commit, a
    message or offsets joining the transaction are refused (``_STATE``, as librdkafka refuses them while it
    commits), since they could be committed without having been flushed."""
    with txn_producer(fed, "tx-unknown-outcome") as p:
        p.init_transactions(60)
        p.begin_transaction()
        committed = write(p, "decided")
        txns = p._txn
        assert txns is not None
        post = txns._post

        def lose_the_reply(action: str, body: dict[str, Any], what: str, key: str | None = None) -> dict[str, Any]:
            reply = post(action, body, what, key)
            if action == "end":
                monkeypatch.setattr(txns, "_post", post)
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the reply was lost", retriable=True))
            return reply

        monkeypatch.setattr(txns, "_post", lose_the_reply)
        with pytest.raises(KafkaException) as unknown:
            p.commit_transaction(60)
        assert unknown.value.args[0].retriable()
        with pytest.raises(KafkaException) as refused:
            p.produce(TOPIC, value=b"after-the-decision", partition=0)
        assert refused.value.args[0].code() == KafkaError._STATE, refused.value
        p.commit_transaction(60)  # the same decision again: the transaction ends as the log decided it
        p.begin_transaction()
        committed |= write(p, "next")
        p.commit_transaction(60)
    seen = read_committed(fed, committed)
    assert committed <= seen and "after-the-decision" not in seen


def test_a_new_instance_fences_the_old_one_whose_open_transaction_is_aborted(fed) -> None:
    zombie = txn_producer(fed, "tx-zombie")
    zombie.init_transactions(60)
    zombie.begin_transaction()
    lost = write(zombie, "zombie")
    assert zombie.flush(30) == 0  # on both clusters, inside the open Kafka transactions
    with txn_producer(fed, "tx-zombie") as p:
        p.init_transactions(60)  # waits until the coordinator aborted the zombie's parts
        with pytest.raises(KafkaException) as fenced:
            zombie.commit_transaction(30)
        assert fenced.value.args[0].fatal(), fenced.value
        with pytest.raises(KafkaException):
            zombie.produce(TOPIC, value=b"late", partition=0)
        p.begin_transaction()
        kept = write(p, "new")
        p.commit_transaction(60)
    seen = read_committed(fed, kept)
    assert kept <= seen and not seen & (lost | {"late"})


def _kill_leader_around_the_decision(fed: LocalFederation, p: FederatedProducer, monkeypatch: Any, before: bool,
                                     abandon: bool = False) -> list[int]:  # fmt: skip
    """Make ``p``'s next decision kill the quorum leader (SIGKILL) just before or just after its record is
    committed; ``abandon``: the producer then stops there, as if it died with the leader."""
    txns = p._txn
    assert txns is not None
    post = txns._post
    killed: list[int] = []

    def post_and_kill(action: str, body: dict[str, Any], what: str, key: str | None = None) -> dict[str, Any]:
        if action == "end" and before and not killed:
            killed.append(fed.quorum.leader())
            fed.quorum.kill(killed[-1])
        first = not killed
        reply = post(action, body, what, key)
        if action == "end" and not before and first:
            killed.append(fed.quorum.leader())
            fed.quorum.kill(killed[-1])
            if abandon:
                raise SystemExit("the producer dies with the leader")
        return reply

    monkeypatch.setattr(txns, "_post", post_and_kill)
    return killed


@pytest.mark.parametrize("before", [True, False], ids=["before_the_decision", "after_the_decision"])
def test_the_quorum_leader_killed_around_the_decision_tears_nothing(fed, monkeypatch, before: bool) -> None:
    with txn_producer(fed, f"tx-leader-{before}") as p:
        p.init_transactions(60)
        p.begin_transaction()
        first = write(p, "first")
        killed = _kill_leader_around_the_decision(fed, p, monkeypatch, before)
        p.commit_transaction(60)  # its calls go to the next leader
        assert killed, "the leader was not killed"
        p.begin_transaction()
        second = write(p, "second")
        p.abort_transaction(60)
        p.begin_transaction()
        third = write(p, "third")
        p.commit_transaction(60)
    seen = read_committed(fed, first | third)
    assert first | third <= seen and not seen & second
    fed.quorum.start(killed[0])


def test_a_decision_whose_leader_and_producer_died_is_completed_by_the_next_leader(fed, monkeypatch) -> None:
    p = txn_producer(fed, "tx-orphan")
    p.init_transactions(60)
    p.begin_transaction()
    orphan = write(p, "orphan")
    killed = _kill_leader_around_the_decision(fed, p, monkeypatch, before=False, abandon=True)
    with pytest.raises(SystemExit):
        p.commit_transaction(60)  # decided commit; the producer ends no participant
    with contextlib.suppress(KafkaException):
        p.close(1)
    with txn_producer(fed, "tx-orphan") as restarted:
        restarted.init_transactions(120)  # fences the orphan's owner: the new leader's driver completes it
        restarted.begin_transaction()
        after = write(restarted, "after")
        restarted.commit_transaction(60)
    seen = read_committed(fed, orphan | after)
    assert orphan | after <= seen
    fed.quorum.start(killed[0])


@pytest.mark.timeout(600)
def test_consume_transform_produce_killed_and_restarted_writes_each_output_exactly_once(fed, tmp_path) -> None:
    n = 3000
    with fed.quorum.controller_client() as admin:
        admin.post("/v1/topics", {"name": "U_Out", "region": "r1", "partitions_per_cluster": 2})
    fed.wait_writable("U_Out")
    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5}) as p:
        for i in range(n):
            p.produce(TOPIC, value=str(i).encode())
        assert p.flush(60) == 0
    rng = random.Random(447)
    command = [sys.executable, "-m", "tests.integration.txn_job", controllers(fed), TOPIC, "U_Out", "20"]
    outputs: Counter[str] = Counter()
    killed_at: list[int] = []  # outputs read when each run was killed
    consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": "check-out",
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe(["U_Out"])
    try:
        for run in range(4):
            log = (tmp_path / f"job-{run}.log").open("w")
            job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2])
            try:
                # killed once it got a little further each time (and a random moment later), the last run not
                kill_at = n * (run + 1) // 4 + rng.randrange(n // 8) if run < 3 else n
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline and len(outputs) < kill_at:
                    outputs.update(m.value().decode() for m in consumer.consume(1000, 0.2))
                    assert job.poll() is None, (tmp_path / f"job-{run}.log").read_text()[-3000:]
            finally:
                job.kill()  # -9: mid-transaction, most likely
                job.wait()
                log.close()
                killed_at.append(len(outputs))
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            outputs.update(m.value().decode() for m in consumer.consume(1000, 0.2))
    finally:
        consumer.close()
    assert killed_at[2] < n, f"the job was not killed while it worked: {killed_at}"
    expected = {f"out-{i}" for i in range(n)}
    assert set(outputs) == expected, (
        f"missing {len(expected - set(outputs))}, e.g. {sorted(expected - set(outputs))[:5]}"
    )
    duplicated = {v: c for v, c in outputs.items() if c > 1}
    assert not duplicated, f"{len(duplicated)} outputs written more than once, e.g. {list(duplicated.items())[:5]}"


def test_a_participant_down_at_commit_keeps_the_commit_and_a_retry_ends_it_when_it_is_back(fed) -> None:
    with txn_producer(fed, "tx-down", **{"message.timeout.ms": 20_000, "kfed.mute.ms": 500}) as p:
        p.init_transactions(60)
        p.begin_transaction()
        values = write(p, "kept")
        assert p.flush(30) == 0  # every write acknowledged: the commit is decided next
        fed.clusters["c2"].kill_broker()
        try:
            with pytest.raises(KafkaException) as down:
                p.commit_transaction(5)  # decided commit; c1's part committed, c2's cannot be ended now
            assert down.value.args[0].retriable(), down.value
        finally:
            fed.clusters["c2"].start_broker()
        p.commit_transaction(120)  # the retry ends the rest
        fed.wait_writable(TOPIC)  # c2 unfenced by its agent
        time.sleep(0.5)  # and no longer muted by this producer
        p.begin_transaction()
        after = write(p, "after")
        p.commit_transaction(60)
    seen = read_committed(fed, values | after)
    assert values | after <= seen


@pytest.mark.brokers("tansu")
def test_a_transaction_on_tansu_sub_clusters_is_refused_naming_the_cluster_and_why(fed) -> None:
    with txn_producer(fed, "tx-tansu") as p:
        p.init_transactions(60)
        p.begin_transaction()
        with pytest.raises(KafkaException) as refused:
            p.produce(TOPIC, value=b"never", partition=0)
        error = refused.value.args[0]
        assert error.code() == KafkaError._UNSUPPORTED_FEATURE and error.txn_requires_abort(), error
        assert "cluster 'c1'" in error.str() and "DescribeTransactions" in error.str(), error.str()
        p.abort_transaction(30)


def test_an_undecided_transaction_past_its_timeout_is_aborted_by_the_coordinator(fed) -> None:
    p = txn_producer(fed, "tx-slow", **{"transaction.timeout.ms": 2000})
    p.init_transactions(60)
    p.begin_transaction()
    late = write(p, "late")  # registered (the registration starts the timeout); then the producer stalls
    with fed.quorum.controller_client() as admin:
        aborted = wait_until(lambda: admin.get("/v1/transactions/tx-slow")["transaction"]["state"]
                             in ("aborting", "complete_abort"), 30, "the coordinator aborted it")  # fmt: skip
    assert aborted
    with pytest.raises(KafkaException) as fenced:
        p.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value  # the timeout fenced this producer's epoch
    with contextlib.suppress(KafkaException):  # as confluent-kafka's, a fenced producer's flush raises
        p.close(1)
    kept = committed_by_another(fed, "tx-slow")
    seen = read_committed(fed, kept)
    assert kept <= seen and not seen & late
