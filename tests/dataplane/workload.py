"""The chaos run's clients: producers and group members of every kind kfed serves, each a thread of the
harness (the Java producer a child process), recording every send, acknowledgement, transaction outcome,
assignment, read and commit in the history ``checker.py`` reads.

- ``SdkProducer``: kfed's SDK straight to the sub-clusters, keyed and key-less, or keyed with a sequence per
  key on a strict topic (that one follows a single controller, ``federation.STRICT_NODE``);
- ``SdkTransactions``: the SDK's cross-cluster transactions, some aborted on purpose;
- ``GatewayProducer``: unmodified clients through the gateways: librdkafka (confluent-kafka without the SDK),
  kafka-python, and the Java ``kafka-clients`` (``tests/gateway/java``) as a process;
- ``SdkMember`` and ``GatewayMember``: group members (auto commit off; they commit what they read every
  second and before a partition is revoked, and leave gracefully), read_committed.

A message's value is its id (``<client>-<n>``): a read names what it read.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sdk import FederatedConsumer, FederatedProducer
from tests.faults.history import History

log = logging.getLogger("chaos")

KEYS = 12  # keys per keyed producer
COMMIT_EVERY_S = 1.0
TXN_SIZE = 4
ABORT_EVERY = 5  # every fifth transaction is aborted by its application
COMMIT_TIMEOUT_S, COMMIT_TRIES = 15.0, 3
FLUSH_S = 60.0
DELIVERY_TIMEOUT_MS = 90_000
"""Unmodified clients' delivery timeout: longer than any outage of the schedule (a broker restarting under load
takes up to a minute), as their defaults are; a timeout while a batch may be in flight makes librdkafka bump
its epoch, and a batch resent so is written twice (no broker deduplicates across epochs)."""
JAVA_PACE_MS = 20  # 50 messages a second


class Client(threading.Thread):
    """One client's loop in a thread until ``finish``; what kills the thread is kept for the run's report."""

    def __init__(self, name: str, history: History) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as e:  # the run reports it: a client that died is a failed run
            log.exception("%s died", self.name)
            self.error = e

    def loop(self) -> None:
        raise NotImplementedError

    def finish(self, timeout_s: float = FLUSH_S + 30) -> None:
        self.stopping.set()
        self.join(timeout_s)
        if self.is_alive() and self.ident is not None:
            stack = "".join(traceback.format_stack(sys._current_frames()[self.ident])[-6:])
            log.error("%s did not finish within %g s; it is at:\n%s", self.name, timeout_s, stack)
            self.error = self.error or TimeoutError(f"{self.name} did not finish within {timeout_s:g} s (stack logged)")

    def add(self, op: str, **fields: Any) -> None:
        self.history.add({"op": op, "client": self.name, "at": self.history.now(), **fields})


# -- producers ------------------------------------------------------------------------------------------
class _Sending(Client):
    """Numbered messages at a steady pace; keyed ones carry their key's sequence number."""

    via = "sdk"  # or "gateway": how the client reaches the sub-clusters

    def __init__(self, name: str, history: History, topic: str, keyed: bool, rate: float, strict: bool) -> None:
        super().__init__(name, history)
        self.topic, self.keyed, self.strict, self.pause_s = topic, keyed, strict, 1.0 / rate
        self.seqs: dict[str, int] = defaultdict(int)
        self.sent = 0
        self.lock = threading.Lock()
        self.answered: set[str] = set()

    def next_message(self) -> tuple[str, str | None, int | None]:
        """Record the next message's send: (id, key, seq); odd numbers are keyed when the producer is (all of
        them on a strict topic)."""
        n = self.sent
        self.sent += 1
        mid = f"{self.name}-{n}"
        key = f"{self.name}-k{n % KEYS}" if self.keyed and (n % 2 or self.strict) else None
        seq = None
        if key is not None:
            self.seqs[key] += 1
            seq = self.seqs[key]
        self.add("send", id=mid, topic=self.topic, key=key, seq=seq, txn=None, via=self.via, call=self.history.now())
        return mid, key, seq

    def acked(self, mid: str, err: Any, partition: int | None, offset: int | None) -> None:
        with self.lock:
            if mid in self.answered:
                return
            self.answered.add(mid)
        if err is None:
            known = offset is not None and offset >= 0
            self.add("ack", id=mid, outcome="ok", partition=partition if known else None,
                     offset=offset if known else None, ret=self.history.now())  # fmt: skip
        else:
            self.add("ack", id=mid, outcome="failed", error=str(err), ret=self.history.now())

    def unanswered(self) -> None:
        """Messages that got no answer by the end: their outcome is unknown."""
        for n in range(self.sent):
            mid = f"{self.name}-{n}"
            if mid not in self.answered:
                self.add("ack", id=mid, outcome="unknown", ret=self.history.now())


class SdkProducer(_Sending):
    def __init__(self, name: str, history: History, controllers: list[str], topic: str, strict: bool,
                 rate: float = 100.0) -> None:  # fmt: skip
        super().__init__(name, history, topic, True, rate, strict)
        self.config = {"kfed.controllers": ",".join(controllers), "linger.ms": 5, "enable.idempotence": True,
                       "log_level": 2}  # fmt: skip

    def loop(self) -> None:
        producer = FederatedProducer(self.config)
        while not self.stopping.is_set():
            mid, key, _ = self.next_message()

            def report(err: Any, msg: Any, mid: str = mid) -> None:
                self.acked(mid, err, msg.partition(), msg.offset())

            producer.produce(self.topic, value=mid.encode(), key=key.encode() if key else None, on_delivery=report)
            producer.poll(0)
            time.sleep(self.pause_s)
        producer.flush(FLUSH_S)
        producer.close(10)
        self.unanswered()


class GatewayProducer(_Sending):
    """An unmodified client through the gateways: ``kind`` is ``librdkafka`` or ``kafka-python``."""

    via = "gateway"

    def __init__(self, name: str, history: History, bootstrap: str, topic: str, kind: str, strict: bool,
                 rate: float = 100.0) -> None:  # fmt: skip
        super().__init__(name, history, topic, True, rate, strict)
        self.bootstrap, self.kind = bootstrap, kind

    def loop(self) -> None:
        send, flush = self._librdkafka() if self.kind == "librdkafka" else self._kafka_python()
        while not self.stopping.is_set():
            mid, key, _ = self.next_message()
            send(mid, key)
            time.sleep(self.pause_s)
        flush()
        self.unanswered()

    def _librdkafka(self) -> tuple[Callable[[str, str | None], None], Callable[[], None]]:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                      "message.timeout.ms": DELIVERY_TIMEOUT_MS, "enable.metrics.push": False,
                      "log_level": 2})  # fmt: skip

        def send(mid: str, key: str | None) -> None:
            def report(err: Any, msg: Any) -> None:
                self.acked(mid, err, msg.partition(), msg.offset())

            p.produce(self.topic, value=mid.encode(), key=key.encode() if key else None, on_delivery=report)
            p.poll(0)

        def flush() -> None:
            p.flush(FLUSH_S)

        return send, flush

    def _kafka_python(self) -> tuple[Callable[[str, str | None], None], Callable[[], None]]:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all", linger_ms=5,
                          enable_idempotence=True, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                          request_timeout_ms=10_000)  # fmt: skip

        def send(mid: str, key: str | None) -> None:
            future = p.send(self.topic, value=mid.encode(), key=key.encode() if key else None)
            future.add_callback(lambda md: self.acked(mid, None, md.partition, md.offset))
            future.add_errback(lambda e: self.acked(mid, e, None, None))

        def flush() -> None:
            p.flush(FLUSH_S)
            p.close(10)

        return send, flush


class JavaProducer(Client):
    """The Java client through the gateways, streaming until its stdin closes (``GatewayClient stream``)."""

    def __init__(self, name: str, history: History, bootstrap: str, topic: str, classpath: str) -> None:
        super().__init__(name, history)
        self.args = ["java", "-cp", classpath, "GatewayClient", "stream", bootstrap, topic, name,
                     "enable.idempotence=true", "acks=all", f"delivery.timeout.ms={DELIVERY_TIMEOUT_MS}",
                     "request.timeout.ms=10000"]  # fmt: skip
        self.topic = topic
        self.proc: subprocess.Popen[str] | None = None

    def loop(self) -> None:
        env = {**os.environ, "GATEWAY_CLIENT_PACE_MS": str(JAVA_PACE_MS)}
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
        assert self.proc.stdout is not None
        watcher = threading.Thread(target=self._close_on_stop, daemon=True)
        watcher.start()
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind not in ("acked", "failed"):
                continue
            mid, *where = rest.split()
            n = int(mid.rsplit("-", 1)[1])
            key = f"key-{n % 23}" if n % 2 else None  # GatewayClient's keys
            # GatewayClient prints a message's outcome only: sent no earlier than a delivery timeout before it
            sent = max(0.0, self.history.now() - DELIVERY_TIMEOUT_MS / 1000)
            self.add("send", id=mid, topic=self.topic, key=key, seq=None, txn=None, via="gateway", call=sent)
            if kind == "acked":
                self.add("ack", id=mid, outcome="ok", partition=int(where[0]), offset=int(where[1]),
                         ret=self.history.now())  # fmt: skip
            else:
                self.add("ack", id=mid, outcome="failed", error=where[0] if where else "", ret=self.history.now())
        if self.proc.wait(FLUSH_S) != 0:
            raise RuntimeError(f"{self.name}: the Java producer exited with {self.proc.returncode}")

    def _close_on_stop(self) -> None:
        self.stopping.wait()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()


class SdkTransactions(Client):
    """Transactions of ``TXN_SIZE`` key-less messages over the SDK; every ``ABORT_EVERY``-th aborted on purpose.
    A commit whose outcome the producer could not learn is recorded ``unknown`` and the producer started anew
    (``init_transactions`` settles its last transaction)."""

    def __init__(self, name: str, history: History, controllers: list[str], topic: str) -> None:
        super().__init__(name, history)
        self.topic = topic
        self.config = {"kfed.controllers": ",".join(controllers), "transactional.id": name, "linger.ms": 5,
                       "log_level": 2}  # fmt: skip
        self.count = 0

    def loop(self) -> None:
        producer = self._producer()
        while not self.stopping.is_set():
            txn = f"{self.name}-t{self.count}"
            self.count += 1
            outcome = self._one(producer, txn)
            self.add("txn", txn=txn, outcome=outcome, ret=self.history.now())
            if outcome == "unknown":
                producer.close()
                producer = self._producer()
            time.sleep(0.1)
        producer.close()

    def _producer(self) -> FederatedProducer:
        while True:
            producer = FederatedProducer(self.config)
            try:
                producer.init_transactions(60)
                return producer
            except KafkaException as e:
                log.info("%s: init_transactions: %s; again", self.name, e)
                producer.close()
                time.sleep(1)

    def _one(self, producer: FederatedProducer, txn: str) -> str:
        """One transaction: its outcome as the producer was told (``commit``, ``abort`` or ``unknown``)."""
        try:
            producer.begin_transaction()
            for i in range(TXN_SIZE):
                mid = f"{txn}-{i}"
                self.add("send", id=mid, topic=self.topic, key=None, seq=None, txn=txn, via="sdk",
                         call=self.history.now())  # fmt: skip

                def report(err: Any, msg: Any, mid: str = mid) -> None:
                    outcome = {"outcome": "ok", "partition": msg.partition(), "offset": msg.offset()} if err is None \
                        else {"outcome": "failed", "error": str(err)}  # fmt: skip
                    self.add("ack", id=mid, ret=self.history.now(), **outcome)

                producer.produce(self.topic, value=mid.encode(), on_delivery=report)
            if self.count % ABORT_EVERY == 0:
                producer.abort_transaction(COMMIT_TIMEOUT_S)
                return "abort"
            return self._commit(producer)
        except KafkaException as e:
            return self._abort_after(producer, e)

    def _commit(self, producer: FederatedProducer) -> str:
        """Commit, retrying what may be retried (``COMMIT_TRIES`` times, as an application gives up at some
        point: the transaction's outcome is then unknown to it)."""
        for _ in range(COMMIT_TRIES):
            try:
                producer.commit_transaction(COMMIT_TIMEOUT_S)
                return "commit"
            except KafkaException as e:
                if not e.args[0].retriable():
                    return self._abort_after(producer, e)
        return "unknown"

    def _abort_after(self, producer: FederatedProducer, e: KafkaException) -> str:
        err: KafkaError = e.args[0]
        if not err.txn_requires_abort():
            return "unknown"
        try:
            producer.abort_transaction(COMMIT_TIMEOUT_S)
            return "abort"
        except KafkaException:
            return "unknown"


# -- group members ------------------------------------------------------------------------------------------
Read = tuple[str, str, int, int]  # the message's id (its value), topic, partition, offset


def _reads(messages: list[Any]) -> list[Read]:
    """confluent-kafka's (or the SDK's) messages as reads; events (an error set) are not."""
    return [(m.value().decode(), m.topic(), m.partition(), m.offset()) for m in messages if m.error() is None]


class _Member(Client):
    """Reads, commits what it read every ``COMMIT_EVERY_S`` and before a revocation, leaves on ``finish``."""

    def __init__(self, name: str, history: History, group: str, topics: list[str]) -> None:
        super().__init__(name, history)
        self.group, self.topics = group, topics
        self.member = name  # the group's member: a new one after its session was lost
        self.lives = 1
        self.read_up_to: dict[tuple[str, int], int] = {}  # read since the last commit: the next offset
        self.ids: set[str] = set()

    def record_assignment(self, op: str, partitions: list[Any]) -> None:
        for tp in partitions:
            self.add(op, group=self.group, member=self.member, topic=tp.topic, partition=tp.partition)

    def record_lost(self, partitions: list[Any]) -> None:
        """The group took this member's partitions without a revocation (its session expired): what it read
        and did not commit may be read again, and from here on it is another member."""
        self.record_assignment("revoke", partitions)
        self.add("member_end", group=self.group, member=self.member, how="expired")
        self.lives += 1
        self.member = f"{self.name}.{self.lives}"
        self.read_up_to.clear()

    def read_until_stopped(self, reads: Callable[[], Iterable[Read]], commit: Callable[[list[TopicPartition]], Any],
                           close: Callable[[], Any]) -> None:  # fmt: skip
        """Record what ``reads`` hands out and commit it every ``COMMIT_EVERY_S``, until ``finish``; then commit,
        ``close`` (leaving the group) and record the graceful end."""
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            for read in reads():
                self.record_read_at(*read)
            if time.monotonic() - last_commit >= COMMIT_EVERY_S:
                self.record_commit(commit, None)
                last_commit = time.monotonic()
        self.record_commit(commit, None)
        close()
        self.add("member_end", group=self.group, member=self.member, how="left")

    def record_read_at(self, mid: str, topic: str, partition: int, offset: int) -> None:
        self.ids.add(mid)
        self.add("read", group=self.group, member=self.member, id=mid, topic=topic, partition=partition,
                 offset=offset)  # fmt: skip
        self.read_up_to[(topic, partition)] = offset + 1

    def record_commit(self, commit: Callable[[list[TopicPartition]], Any], partitions: list[Any] | None) -> None:
        """Commit what was read (of ``partitions`` only, when given) synchronously; record each outcome."""
        wanted = {(tp.topic, tp.partition) for tp in partitions} if partitions is not None else None
        offsets = [TopicPartition(t, p, o) for (t, p), o in self.read_up_to.items()
                   if wanted is None or (t, p) in wanted]  # fmt: skip
        if not offsets:
            return
        try:
            commit(offsets)
            outcome = "ok"
        except Exception as e:  # each client's own commit error: recorded as a failed commit
            outcome = f"failed: {type(e).__name__}: {e}"
        for tp in offsets:
            self.add("commit", group=self.group, member=self.member, topic=tp.topic, partition=tp.partition,
                     offset=tp.offset, outcome=outcome)  # fmt: skip
            if outcome == "ok":
                self.read_up_to.pop((tp.topic, tp.partition), None)


class SdkMember(_Member):
    def __init__(self, name: str, history: History, controllers: list[str], group: str, topics: list[str]) -> None:
        super().__init__(name, history, group, topics)
        self.config = {"kfed.controllers": ",".join(controllers), "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                       "kfed.session.timeout.ms": 10_000, "log_level": 2}  # fmt: skip

    def loop(self) -> None:
        consumer = FederatedConsumer(self.config)

        def commit(offsets: list[TopicPartition]) -> None:
            # the positions of what was handed out, as auto commit does: past a transaction's trailing marker,
            # which an explicit offset + 1 never passes (a drain would wait for it: RELIABILITY.md)
            consumer.commit(asynchronous=False)

        def revoked(_c: Any, ps: list[Any]) -> None:
            self.record_commit(commit, [TopicPartition(t, p) for t, p in ps])
            self.record_assignment("revoke", [TopicPartition(t, p) for t, p in ps])

        consumer.subscribe(
            self.topics,
            on_assign=lambda _c, ps: self.record_assignment("assign", [TopicPartition(t, p) for t, p in ps]),
            on_revoke=revoked,
        )
        self.read_until_stopped(lambda: _reads(consumer.consume(200, 0.2)), commit, consumer.close)


class GatewayMember(_Member):
    """confluent-kafka's own consumer (librdkafka, no SDK) through the gateways."""

    def __init__(self, name: str, history: History, bootstrap: str, group: str, topics: list[str]) -> None:
        super().__init__(name, history, group, topics)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                       "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000, "enable.metrics.push": False,
                       "log_level": 2}  # fmt: skip

    def loop(self) -> None:
        consumer = Consumer(self.config)

        def commit(offsets: list[TopicPartition]) -> None:
            for tp in consumer.commit(offsets=offsets, asynchronous=False) or []:
                if tp.error is not None:
                    raise KafkaException(tp.error)

        def revoked(_c: Any, ps: list[TopicPartition]) -> None:
            self.record_commit(commit, ps)
            self.record_assignment("revoke", ps)

        consumer.subscribe(self.topics, on_assign=lambda _c, ps: self.record_assignment("assign", ps),
                           on_revoke=revoked, on_lost=lambda _c, ps: self.record_lost(ps))  # fmt: skip
        self.read_until_stopped(lambda: _reads(consumer.consume(200, 0.2)), commit, consumer.close)


class KafkaPythonMember(_Member):
    """kafka-python's consumer through the gateways."""

    def __init__(self, name: str, history: History, bootstrap: str, group: str, topics: list[str]) -> None:
        super().__init__(name, history, group, topics)
        self.bootstrap = bootstrap

    def loop(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
        from kafka import TopicPartition as KafkaTopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 isolation_level="read_committed", session_timeout_ms=10_000,
                                 heartbeat_interval_ms=1000)  # fmt: skip

        def commit(offsets: list[TopicPartition]) -> None:
            consumer.commit({KafkaTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(tp.offset, "", -1)
                             for tp in offsets})  # fmt: skip

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.record_commit(commit, list(revoked))
                member.record_assignment("revoke", list(revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.record_assignment("assign", list(assigned))

        consumer.subscribe(self.topics, listener=Listener())

        def reads() -> list[Read]:
            batches = consumer.poll(timeout_ms=200).values()
            return [(r.value.decode(), r.topic, r.partition, r.offset) for records in batches for r in records]

        self.read_until_stopped(reads, commit, consumer.close)


class JavaMember(_Member):
    """The Java client through the gateways (``GatewayClient consume``: one topic, auto commit, a synchronous
    commit on revocation, which it reports when it fails). Its commits are not in the history: a re-read after
    a failed one is excused as after a lost session."""

    def __init__(self, name: str, history: History, bootstrap: str, group: str, topic: str, classpath: str) -> None:
        super().__init__(name, history, group, [topic])
        self.args = ["java", "-cp", classpath, "GatewayClient", "consume", bootstrap, topic, group, "",
                     "session.timeout.ms=10000", "isolation.level=read_committed"]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None

    def loop(self) -> None:
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
        assert self.proc.stdout is not None
        threading.Thread(target=self._close_on_stop, daemon=True).start()
        topic = self.topics[0]
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "got":
                mid, partition, offset = rest.split()
                self.record_read_at(mid, topic, int(partition), int(offset))
            elif kind in ("assigned", "revoked") and rest:
                parts = [TopicPartition(topic, int(p)) for p in rest.split(",")]
                self.record_assignment("assign" if kind == "assigned" else "revoke", parts)
            elif kind == "uncommitted":
                self.record_lost([])
        if self.proc.wait(FLUSH_S) != 0:
            raise RuntimeError(f"{self.name}: the Java consumer exited with {self.proc.returncode}")
        self.add("member_end", group=self.group, member=self.member, how="left")

    def _close_on_stop(self) -> None:
        self.stopping.wait()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
