"""Transactions of ``FederatedProducer`` (``transactional.id``), coordinated by the quorum (docs/TRANSACTIONS.md).

Configured and called like confluent-kafka's transactional ``Producer``: ``transactional.id`` and
``transaction.timeout.ms`` (the federated one: an undecided transaction older than this is aborted by the
coordinator), then ``init_transactions``, ``begin_transaction``, ``produce``, ``send_offsets_to_transaction``,
``commit_transaction`` / ``abort_transaction``. Errors are ``KafkaException`` of a ``KafkaError`` with
confluent-kafka's flags: ``retriable()`` (call again), ``txn_requires_abort()`` (abort, then start over),
``fatal()`` (make a new producer: this one was fenced by a newer instance).

Each participant cluster ``c`` runs its part as its own Kafka transaction, transactional id ``T@c``, on
the federated producer's physical producer for ``c``. The protocol with the quorum:

- ``init_transactions``: a new epoch in the log (older instances fenced, their undecided transaction
  aborted), then wait until the previous transaction of this id is complete on every participant (the
  leader's driver completes a fenced owner's), as Kafka's InitProducerId waits with CONCURRENT_TRANSACTIONS;
- before the first write to a topic in a transaction (and again when the metadata changed), every physical
  partition of it is registered in the log; ``send_offsets_to_transaction`` registers the group on the
  input partitions' cluster;
- commit: flush every physical producer ("prepare"; a failed delivery leaves only abort), log the decision,
  commit each participant's Kafka transaction, log the completions. Abort: the same with abort.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Final, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from metadata_client.client import ControllerClient
from metadata_client.follower import FollowerError, LogFollower
from metadata_log.commands import DEFAULT_TRANSACTION_TIMEOUT_MS
from metadata_log.errors import Conflict, InvalidRequest, KfedError, NotFound
from metadata_log.image import PartitionLocation
from metadata_log.image.transactions import PARTICIPANT_TRANSACTION_TIMEOUT_MS, participant_transactional_id

from .config import ClientConfig


class _Producer(Protocol):
    """What the transactional side uses of its ``FederatedProducer`` (a protocol: the producer imports this
    module)."""

    _follower: LogFollower
    _producers: dict[str, Producer]

    def _producer(self, cluster_id: str) -> Producer: ...

    def flush(self, timeout: float | None = None) -> int: ...


class _Consumer(Protocol):
    """What ``send_offsets_to_transaction`` uses of a ``FederatedConsumer``."""

    def physical_offsets(self, offsets: Sequence[TopicPartition]) -> dict[str, tuple[list[TopicPartition], Any]]: ...


log = logging.getLogger(__name__)

CLIENT_DEADLINE_S: Final = 10.0
"""How long one call to the quorum retries over the controllers (with the same Idempotency-Key)."""
DEFAULT_TIMEOUT_S: Final = 60.0
WAIT_STEP_S: Final = 0.1
MAX_PARALLEL_ENDS: Final = 8
"""Participants whose Kafka transactions a commit or abort ends at the same time."""
COMPLETION_REPORT_S: Final = 1.0
"""How long the owner's completions wait for the next registration to ride on (see ``_report_soon``)."""

_KAFKA_ERRORS: Final = {  # the coordinator's refusal (``kafka_error``) -> confluent-kafka's code and flags
    "PRODUCER_FENCED": (KafkaError._FENCED, {"fatal": True}),
    "INVALID_PRODUCER_ID_MAPPING": (KafkaError._STATE, {}),
    "INVALID_TXN_STATE": (KafkaError._STATE, {"txn_requires_abort": True}),
    "CONCURRENT_TRANSACTIONS": (KafkaError._TIMED_OUT, {"retriable": True}),
    "_UNSUPPORTED_FEATURE": (KafkaError._UNSUPPORTED_FEATURE, {"txn_requires_abort": True}),
}


def txn_error(code: int, reason: str, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, reason, **flags))


def _from_kfed(e: KfedError, what: str) -> KafkaException:
    """A coordinator's answer as confluent-kafka would raise it."""
    name = e.extra.get("kafka_error") if isinstance(e.extra, dict) else None
    if name in _KAFKA_ERRORS:
        code, flags = _KAFKA_ERRORS[name]
        return txn_error(code, f"{what}: {e.detail}", **flags)
    if e.retryable:
        return txn_error(KafkaError._TIMED_OUT, f"{what}: {e.detail}", retriable=True)
    if isinstance(e, InvalidRequest | NotFound):
        return txn_error(KafkaError._INVALID_ARG, f"{what}: {e.detail}")
    if isinstance(e, Conflict):
        return txn_error(KafkaError._STATE, f"{what}: {e.detail}", txn_requires_abort=True)
    return txn_error(KafkaError._FAIL, f"{what}: {e.detail}")


class GroupMetadata:
    """``FederatedConsumer.consumer_group_metadata()``: the group and the consumer whose positions it maps
    from logical to physical partitions."""

    def __init__(self, group: str, consumer: _Consumer) -> None:
        self.group = group
        self.consumer = consumer


class Transactions:
    """The transactional side of one ``FederatedProducer`` (see the module)."""

    def __init__(self, producer: _Producer, transactional_id: str, timeout_ms: int, client: ControllerClient):
        self._producer = producer
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._client = client
        self._identity: tuple[int, int] | None = None  # (producer_id, epoch) from init_transactions
        self._sequence = 0
        self._in_txn = False
        self._ending = False  # commit_transaction or abort_transaction was called: nothing may join it now
        self._partitions: set[PartitionLocation] = set()
        self._groups: set[tuple[str, str]] = set()
        # topic -> metadata offset its partitions were registered at; emptied when a transaction starts or ends
        self._topics_at: dict[str, int] = {}
        self._log_offset = -1  # of this producer's last write to the log
        self._failed: KafkaError | None = None  # a delivery error in this transaction: only abort is left
        self._fatal: KafkaError | None = None
        self._ended: set[str] = set()  # clusters whose physical producer ended this transaction
        self._taken_over: set[str] = set()  # ... of which the coordinator fenced the producer (it completes them)
        self._unreported: tuple[dict[str, int], list[str]] | None = None  # completions not in the log yet
        self._report_lock = threading.Lock()
        self._decision: tuple[str, dict[str, Any]] | None = None  # (Idempotency-Key, body) of the last decision
        self._pool = ThreadPoolExecutor(MAX_PARALLEL_ENDS, thread_name_prefix="kfed-txn-end")

    @classmethod
    def from_config(cls, producer: _Producer, config: ClientConfig) -> Transactions | None:
        """The transactional side when the config has ``transactional.id`` (its keys are taken out of the
        physical producers' config)."""
        cfg = config.kafka
        tid = cfg.pop("transactional.id", None)
        timeout_ms = int(cfg.pop("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        if tid is None:
            return None
        client = ControllerClient(config.controllers, deadline_s=CLIENT_DEADLINE_S, access=config.access)
        return cls(producer, str(tid), timeout_ms, client)

    # -- what the producer asks ----------------------------------------------------------------------
    def physical_config(self, cluster_id: str) -> dict[str, Any]:
        return {
            "transactional.id": participant_transactional_id(self.transactional_id, cluster_id),
            "transaction.timeout.ms": PARTICIPANT_TRANSACTION_TIMEOUT_MS,
        }

    def started(self, producer: Producer) -> None:
        """A new physical producer: Kafka's InitProducerId for its participant id (its cluster's previous
        part of this id is complete: ``init_transactions`` waited for it), and into the open transaction."""
        self._kafka(producer.init_transactions, self.timeout_ms / 1000)
        if self._in_txn:
            self._kafka(producer.begin_transaction)

    def delivery_failed(self, err: KafkaError) -> None:
        if self._in_txn and self._failed is None:
            self._failed = err

    def guard(self, produce: Callable[..., None]) -> Callable[..., None]:
        """``produce`` that registers a topic's partitions before its first message in a transaction."""
        topics_at = self._topics_at
        follower = self._producer._follower

        def transactional_produce(topic: str, *args: Any, **kwargs: Any) -> None:
            if topics_at.get(topic) != follower.image.offset:
                self._register_topic(topic)
            produce(topic, *args, **kwargs)

        return transactional_produce

    # -- confluent-kafka's transactional API ---------------------------------------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (DEFAULT_TIMEOUT_S if timeout is None else timeout)
        self._check_fatal()
        self._report()
        reply = self._post("init", {"timeout_ms": self.timeout_ms}, "init_transactions", key=str(uuid.uuid4()))
        self._identity = (reply["producer_id"], reply["epoch"])
        self._sequence = 0
        self._in_txn = False
        while not _complete(reply.get("transaction")):
            if time.monotonic() >= deadline:
                raise txn_error(
                    KafkaError._TIMED_OUT,
                    f"the previous transaction of {self.transactional_id!r} "
                    f"is still {reply['transaction']['state']}; retry",
                    retriable=True,
                )
            time.sleep(WAIT_STEP_S)
            reply = self._get()
            if (reply["producer_id"], reply["epoch"]) != self._identity:
                raise txn_error(KafkaError._FENCED, "fenced by a newer instance during init_transactions", fatal=True)

    def begin_transaction(self) -> None:
        self._check_fatal()
        if self._identity is None:
            raise txn_error(KafkaError._STATE, "call init_transactions first")
        if self._in_txn:
            raise txn_error(KafkaError._STATE, "a transaction is already open")
        for producer in list(self._producer._producers.values()):
            self._kafka(producer.begin_transaction)
        self._in_txn = True
        self._ending = False
        self._partitions, self._groups = set(), set()
        self._topics_at.clear()  # in place: ``guard`` holds it
        self._ended, self._taken_over = set(), set()
        self._failed = None

    def send_offsets_to_transaction(
        self, positions: Iterable[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit the group's offsets (logical partitions, the offsets to read next) with this transaction."""
        self._check_joinable()
        if not isinstance(group_metadata, GroupMetadata):
            raise txn_error(
                KafkaError._INVALID_ARG, "group_metadata must be FederatedConsumer.consumer_group_metadata()"
            )
        by_cluster = group_metadata.consumer.physical_offsets(list(positions))
        groups = {(cluster_id, group_metadata.group) for cluster_id in by_cluster} - self._groups
        if groups:
            self._add([], sorted(groups), "send_offsets_to_transaction")
            self._groups |= groups
        remaining = DEFAULT_TIMEOUT_S if timeout is None else timeout
        for cluster_id, (offsets, physical_metadata) in by_cluster.items():
            producer = self._producer._producers.get(cluster_id) or self._producer._producer(cluster_id)
            self._kafka(producer.send_offsets_to_transaction, offsets, physical_metadata, remaining)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._end(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._end(False, timeout)

    # -- the steps -------------------------------------------------------------------------------------
    def _end(self, commit: bool, timeout: float | None) -> None:
        self._check_open()
        # From the first attempt on, the decision may be in the log (a lost reply): a message or offsets
        # joining now could be committed without having been flushed, as librdkafka refuses them too.
        self._ending = True
        self._topics_at.clear()  # in place (``guard`` holds it): the next produce checks _check_joinable
        deadline = time.monotonic() + (DEFAULT_TIMEOUT_S if timeout is None else timeout)
        clusters = {p.cluster_id for p in self._partitions} | {c for c, _ in self._groups}
        if commit:
            if self._producer.flush(max(0.0, deadline - time.monotonic())):  # prepare: every write acknowledged
                raise txn_error(KafkaError._TIMED_OUT, "commit_transaction: messages still in flight", retriable=True)
            if self._failed is not None:
                raise txn_error(
                    self._failed.code(),
                    f"a message of this transaction failed ({self._failed.str()}): abort it",
                    txn_requires_abort=True,
                )
        else:
            # librdkafka 2.x aborting while an AddPartitionsToTxn is in flight can send EndTxn(abort) for a
            # transaction the broker has not started: INVALID_TXN_STATE, fatal (confluentinc/librdkafka#4849,
            # seen here on Kafka 4.x). Letting the writes land first leaves the abort an ordinary one.
            self._producer.flush(max(0.0, deadline - time.monotonic()))
        registered = bool(clusters)
        if registered:
            assert self._identity is not None
            key = f"{self.transactional_id}/{self._identity}/{self._sequence}/end/{commit}"
            if self._decision is None or self._decision[0] != key:  # a retry sends the very same request
                self._decision = (key, {**self._txn_id(), "commit": commit, "min_offset": self._log_offset})
            self._post("end", self._decision[1], "commit_transaction" if commit else "abort_transaction", key=key)
        # The decision is in the log: from here on, only completion.
        self._end_parts(commit, deadline)
        self._in_txn = False
        self._topics_at.clear()  # a produce outside a transaction is refused again (in place: ``guard`` holds it)
        if registered:
            completed = sorted(clusters - self._taken_over)
            if completed:
                with self._report_lock:
                    self._unreported = (self._txn_id(), completed)
                self._report_soon()
            self._sequence += 1
        if self._fatal is not None:
            raise KafkaException(self._fatal)

    def _end_parts(self, commit: bool, deadline: float) -> None:
        """End this transaction on every physical producer not ended yet, side by side (librdkafka releases
        the GIL); a retry after a retriable error ends only the rest."""
        todo = [(c, p) for c, p in self._producer._producers.items() if c not in self._ended]

        def end(producer: Producer) -> None:
            remaining = max(0.0, deadline - time.monotonic())
            if commit:
                producer.commit_transaction(remaining)
            else:
                producer.abort_transaction(remaining)

        futures = [(c, self._pool.submit(end, p)) for c, p in todo[1:]]  # the first one on this thread
        outcomes = [(c, _outcome(partial(end, p))) for c, p in todo[:1]]
        outcomes += [(c, _outcome(f.result)) for c, f in futures]
        retry: KafkaException | None = None
        for cluster_id, e in outcomes:
            if e is None:
                self._ended.add(cluster_id)
                continue
            error = e.args[0]
            if error.fatal():  # fenced: the coordinator took this part over (it completes it)
                self._fatal = error
                self._ended.add(cluster_id)
                self._taken_over.add(cluster_id)
                continue
            done = "committed" if commit else "aborted"
            retry = txn_error(
                error.code(),
                f"the transaction is {done}; ending it on {cluster_id}: {error.str()}; retry",
                retriable=True,
            )
        if retry is not None:
            raise retry

    def _report_soon(self) -> None:
        """The owner's completions ride on its next registration (``completed``); when none comes within
        ``COMPLETION_REPORT_S``, they are written on their own, well before the coordinator's grace runs out
        (an owner that leaves a decided transaction incomplete is fenced)."""
        timer = threading.Timer(COMPLETION_REPORT_S, self._report)
        timer.daemon = True
        timer.start()

    def _report(self) -> None:
        with self._report_lock:
            unreported = self._unreported
            if unreported is None:
                return
            txn_id, clusters = unreported
            try:
                self._post("completed", {**txn_id, "cluster_ids": clusters}, "reporting completions")
                self._unreported = None
            except KafkaException as e:
                log.warning("transaction %s: completions not reported yet (%s)", self.transactional_id, e)

    def _register_topic(self, topic: str) -> None:
        self._check_joinable()
        follower = self._producer._follower
        if not follower.follows(topic):  # its partitions must be known before a message of it is produced
            try:
                follower.follow((topic,))
            except FollowerError as e:
                raise txn_error(KafkaError._TIMED_OUT, f"no metadata of topic {topic!r}: {e}", retriable=True) from e
        image = follower.image
        t = image.topics.get(topic)
        if t is None:
            self._topics_at.pop(topic, None)
            return  # produce reports the unknown topic
        wanted = {
            PartitionLocation(p.cluster_id, p.physical_topic, p.physical_partition)
            for p in t.partitions
            if p.state != "removed"
        } - self._partitions
        if wanted:
            self._add(sorted(wanted), [], "produce")
            self._partitions |= wanted
        self._topics_at[topic] = image.offset

    def _add(self, partitions: list[PartitionLocation], groups: list[tuple[str, str]], what: str) -> None:
        with self._report_lock:  # the previous transaction's completions, if not written yet, ride along
            unreported = self._unreported
            previous = {**self._txn_id(), "sequence": self._sequence - 1}
            completed = unreported[1] if unreported is not None and unreported[0] == previous else []
            self._add_with(partitions, groups, completed, what)
            if completed:
                self._unreported = None

    def _add_with(
        self, partitions: list[PartitionLocation], groups: list[tuple[str, str]], completed: list[str], what: str
    ) -> None:
        body = {
            **self._txn_id(),
            "partitions": [
                {
                    "cluster_id": p.cluster_id,
                    "physical_topic": p.physical_topic,
                    "physical_partition": p.physical_partition,
                }
                for p in partitions
            ],
            "groups": [{"cluster_id": c, "group": g} for c, g in groups],
            "completed": completed,
            "min_offset": self._log_offset,
        }
        self._post("add", body, what)

    # -- plumbing ----------------------------------------------------------------------------------------
    def _txn_id(self) -> dict[str, int]:
        assert self._identity is not None
        return {"producer_id": self._identity[0], "epoch": self._identity[1], "sequence": self._sequence}

    def _post(self, action: str, body: dict[str, Any], what: str, key: str | None = None) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = self._client.post(
                f"/v1/transactions/{self.transactional_id}/{action}", body, idempotency_key=key or str(uuid.uuid4())
            )
        except KfedError as e:
            error = _from_kfed(e, what)
            if error.args[0].fatal():
                self._fatal = error.args[0]
            raise error from None
        self._log_offset = max(self._log_offset, int(reply.get("offset", -1)))
        return reply

    def _get(self) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = self._client.get(
                f"/v1/transactions/{self.transactional_id}", min_offset=self._log_offset
            )
        except KfedError as e:
            raise _from_kfed(e, "init_transactions") from None
        return reply

    def _kafka(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except KafkaException as e:
            if e.args[0].fatal():
                self._fatal = e.args[0]
            raise

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise KafkaException(self._fatal)

    def _check_open(self) -> None:
        self._check_fatal()
        if not self._in_txn:
            raise txn_error(KafkaError._STATE, "no transaction is open: call begin_transaction first")

    def _check_joinable(self) -> None:
        """A message or offsets may join the open transaction (not once its end was asked for)."""
        self._check_open()
        if self._ending:
            raise txn_error(
                KafkaError._STATE, "the transaction is ending: retry commit_transaction or abort_transaction"
            )

    def close(self) -> None:
        self._report()
        self._pool.shutdown(wait=False)
        self._client.close()


def _outcome(call: Callable[[], Any]) -> KafkaException | None:
    try:
        call()
    except KafkaException as e:
        return e
    return None


def _complete(transaction: dict[str, Any] | None) -> bool:
    return transaction is None or transaction["state"] in ("complete_commit", "complete_abort")


class TransactionalApi:
    """confluent-kafka's transactional methods on ``FederatedProducer`` (a mixin: its ``_txn`` does the work)."""

    _txn: Transactions | None

    def _transactions(self) -> Transactions:
        if self._txn is None:
            raise txn_error(KafkaError._NOT_CONFIGURED, "the producer has no 'transactional.id'")
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Fence older instances of this ``transactional.id`` and wait for their transaction to end."""
        self._transactions().init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit ``group_metadata``'s offsets ``positions`` (logical partitions) with this transaction."""
        self._transactions().send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._transactions().commit_transaction(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._transactions().abort_transaction(timeout)
