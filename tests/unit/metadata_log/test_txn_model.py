"""Model test of the transaction coordinator (``metadata_log/txn.py``) with its participants and producers.

Hypothesis interleaves, for two transactional ids over two sub-clusters: producer instances starting
(init_transactions), registering and writing, committing, aborting and completing; instances crashing or
going on as zombies after a newer instance fenced them; the coordinator's timeouts, its participant
driver, a lost reply, a decision validated against a stale state, and a coordinator failover (its state
rebuilt from the log); participant clusters going down and up.

The participants are a small model of a Kafka transaction coordinator as librdkafka uses it (transaction
version 1: one producer epoch across transactions; InitProducerId aborts the open transaction and fences;
a write needs the partition added to the open transaction; a broker may refuse a message). The producers
follow the SDK protocol of docs/TRANSACTIONS.md (a transaction with a failed message only aborts); the
driver the one of ``completion_tasks``.

Checked: at every step, nothing is visible to a read_committed reader unless the log decided its
transaction commit, and every commit decision came from the then-current epoch; after quiescing (every
cluster up, the clock past every timeout, the driver run dry), every transaction is complete and either
entirely visible or entirely invisible (every message the application gave it, failed ones included), and
the state equals its own replay from the log. The model can fail: a planted bug each in the producer's
rule, the coordinator's timeouts and the participant driver's tasks must be found (the end of this file).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from metadata_log import commands
from metadata_log.errors import KfedError
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, PartitionLocation, apply
from metadata_log.image import transactions as T
from metadata_log.records import (
    ClusterRegistered,
    TxnDecided,
    TxnProducerInitialized,
    TxnRecord,
)
from tests.unit.planted import FIND_BUG as PLANTED
from tests.unit.planted import finds_a_bug

CLUSTERS = ("c1", "c2")
TIDS = ("a", "b")
TIMEOUT_MS = 1_000
GRACE_MS = 500

TxnKey = tuple[str, int, int, int]  # transactional id, producer id, epoch, sequence


class Down(Exception):
    """The participant cluster is unreachable."""


class KafkaFenced(Exception):
    pass


class KafkaInvalidState(Exception):
    pass


@dataclass
class KafkaTxn:
    """One Kafka transactional.id on one cluster."""

    pid: int
    epoch: int
    open: bool = False
    partitions: set[int] = field(default_factory=set)
    records: list[str] = field(default_factory=list)
    last_end: bool | None = None  # the last transaction's outcome: True = committed


class Participant:
    """A Kafka cluster's transaction coordinator and partitions, as far as transactions go."""

    def __init__(self) -> None:
        self.up = True
        self.txns: dict[str, KafkaTxn] = {}
        self.next_pid = 0
        self.visible: set[str] = set()  # what a read_committed reader sees

    def _check(self, ktid: str, pid: int, epoch: int) -> KafkaTxn:
        if not self.up:
            raise Down()
        k = self.txns.get(ktid)
        if k is None or (k.pid, k.epoch) != (pid, epoch):
            raise KafkaFenced()
        return k

    def _end(self, k: KafkaTxn, commit: bool) -> None:
        if commit:
            self.visible.update(k.records)
        k.open, k.partitions, k.records, k.last_end = False, set(), [], commit

    def init_pid(self, ktid: str, expect: tuple[int, int] | None = None) -> tuple[int, int]:
        """InitProducerId: aborts the open transaction and fences the older epoch; with ``expect`` (KIP-360's
        producer id and epoch) only if they are still the current ones."""
        if not self.up:
            raise Down()
        k = self.txns.get(ktid)
        if expect is not None and (k is None or (k.pid, k.epoch) != expect):
            raise KafkaFenced()
        if k is None:
            self.txns[ktid] = k = KafkaTxn(self.next_pid, 0)
            self.next_pid += 1
        else:
            if k.open:
                self._end(k, False)
            k.epoch += 1
        return k.pid, k.epoch

    def add_partition(self, ktid: str, pid: int, epoch: int, partition: int) -> None:
        k = self._check(ktid, pid, epoch)
        k.open = True
        k.partitions.add(partition)

    def produce(self, ktid: str, pid: int, epoch: int, partition: int, rid: str) -> None:
        k = self._check(ktid, pid, epoch)
        if not k.open or partition not in k.partitions:
            raise KafkaInvalidState()  # KIP-890 part 1: the partition must be in the open transaction
        k.records.append(rid)

    def end_txn(self, ktid: str, pid: int, epoch: int, commit: bool) -> None:
        k = self._check(ktid, pid, epoch)
        if k.open:
            self._end(k, commit)
        elif k.last_end != commit:
            raise KafkaInvalidState()  # a retry of the same end is fine, the other end is not

    def describe(self, ktid: str) -> KafkaTxn | None:
        if not self.up:
            raise Down()
        return self.txns.get(ktid)


@dataclass
class Instance:
    """One producer instance running the SDK protocol (its memory is lost when it crashes)."""

    tid: str
    pid: int
    epoch: int
    sequence: int = 0
    state: str = "idle"  # idle | open | decided
    commit: bool = False
    failed: bool = False  # a write failed: the transaction can only abort
    ending: bool = False  # its end was asked for (the decision may be in the log): nothing joins it now
    dead: bool = False  # fenced (fatal) or crashed
    registered: set[tuple[str, int]] = field(default_factory=set)
    kafka: dict[str, tuple[int, int]] = field(default_factory=dict)  # cluster -> Kafka producer id, epoch
    in_kafka_txn: dict[str, set[int]] = field(default_factory=dict)  # cluster -> partitions added
    completed: set[str] = field(default_factory=set)  # clusters this instance ended its decided txn on

    @property
    def key(self) -> TxnKey:
        return (self.tid, self.pid, self.epoch, self.sequence)

    @property
    def clusters(self) -> set[str]:
        return {c for c, _ in self.registered}


CLUSTERS_REGISTERED: MetadataImage = apply(
    EMPTY_IMAGE, [ClusterRegistered(c, "r1", "127.0.0.1:9092") for c in CLUSTERS]
)


def holding(txns: T.Transactions) -> MetadataImage:
    """An image of the model's clusters whose transactions are ``txns``: what the commands read."""
    return dataclasses.replace(CLUSTERS_REGISTERED, transactions=txns)


def expire(txns: T.Transactions, now_ms: int) -> tuple[TxnRecord, ...]:
    return commands.expire_transactions(holding(txns), now_ms, GRACE_MS).records  # type: ignore[return-value]


@dataclass(eq=False)
class Job:
    """One task of the participant driver, and what DescribeTransactions showed: (pid, epoch, open)."""

    task: T.CompletionTask
    seen: tuple[int, int, bool] | None = None


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.txns = T.EMPTY_TRANSACTIONS
        self.previous = T.EMPTY_TRANSACTIONS  # the state one batch ago: a command validated against it is stale
        self.log: list[TxnRecord] = []
        self.now_ms = 0
        self.clusters = {c: Participant() for c in CLUSTERS}
        self.instances: list[Instance] = []
        self.rids = 0
        self.owner_of: dict[str, TxnKey] = {}  # record id -> its transaction
        self.decisions: dict[TxnKey, bool] = {}
        self.current_epoch: dict[str, tuple[int, int]] = {}  # the harness's own view of the log's fencing
        self.jobs: list[Job] = []  # the participant driver's tasks in flight

    # -- the log --------------------------------------------------------------------------------------
    def append(self, records: tuple[TxnRecord, ...]) -> bool:
        """Commit a batch; False when replay refuses it (it lost a race to an earlier batch)."""
        try:
            after = T.replay(self.txns, records)
        except InvalidRecord:
            return False
        for r in records:
            if isinstance(r, TxnProducerInitialized):
                self.current_epoch[r.transactional_id] = (r.producer_id, r.epoch)
            elif isinstance(r, TxnDecided):
                key = (r.transactional_id, r.producer_id, r.epoch, r.sequence)
                assert key not in self.decisions, f"a second decision for {key}"
                assert not r.commit or self.current_epoch[r.transactional_id] == (r.producer_id, r.epoch), (
                    f"zombie commit: {key} decided commit after epoch {self.current_epoch[r.transactional_id]}"
                )
                self.decisions[key] = r.commit
        self.previous, self.txns = self.txns, after
        self.log.extend(records)
        return True

    def command(self, fn: object, *args: object, stale: bool = False, **kwargs: object) -> commands.Result | None:
        """Validate against the state (or a stale one), then commit; None when refused either way."""
        try:
            result = fn(holding(self.previous if stale else self.txns), *args, **kwargs)  # type: ignore[operator]
        except KfedError:
            return None
        return result if self.append(result.records) else None

    # -- producers ------------------------------------------------------------------------------------
    @initialize()
    def start(self) -> None:
        """One producer per transactional id to begin with, so random steps reach deep states."""
        for tid in TIDS:
            self.init(tid, reply_lost=False)

    @rule(tid=st.sampled_from(TIDS), reply_lost=st.booleans())
    def init(self, tid: str, reply_lost: bool) -> None:
        result = self.command(commands.init_transactions, tid, TIMEOUT_MS, self.now_ms)
        if result is not None and not reply_lost:
            self.instances.append(Instance(tid, result.reply["producer_id"], result.reply["epoch"]))

    def _live(self, index: int, state: str | None = None) -> Instance | None:
        live = [i for i in self.instances if not i.dead and state in (None, i.state)]
        return live[index % len(live)] if live else None

    def _kafka_identity(self, inst: Instance, cluster: str) -> tuple[int, int]:
        if cluster not in inst.kafka:  # librdkafka's init_transactions on its first use of the cluster
            inst.kafka[cluster] = self.clusters[cluster].init_pid(T.participant_transactional_id(inst.tid, cluster))
        return inst.kafka[cluster]

    @precondition(lambda self: any(not i.dead for i in self.instances))
    @rule(
        index=st.integers(0, 7),
        cluster=st.sampled_from(CLUSTERS),
        partition=st.integers(0, 1),
        refused=st.integers(0, 7).map(lambda n: n == 0),
    )
    def produce(self, index: int, cluster: str, partition: int, refused: bool = False) -> None:
        """A message of the instance's transaction; ``refused``: the broker refuses it (too large, say)."""
        inst = self._live(index)
        if inst is None or inst.state == "decided" or inst.failed or inst.ending:
            return
        if (cluster, partition) not in inst.registered:
            result = self.command(
                commands.add_to_transaction, inst.tid, inst.pid, inst.epoch, inst.sequence, self.now_ms,
                partitions=[PartitionLocation(cluster, "t", partition)], completed=inst.completed,
            )  # fmt: skip
            if result is None:
                producer = self.txns.producers[inst.tid]
                inst.dead = (producer.producer_id, producer.epoch) != (inst.pid, inst.epoch)
                return
            inst.registered.add((cluster, partition))
            inst.state, inst.completed = "open", set()
        ktid = T.participant_transactional_id(inst.tid, cluster)
        rid = f"r{self.rids}"
        self.rids += 1
        self.owner_of[rid] = inst.key  # the application's message: its transaction commits only with it
        try:
            pid, epoch = self._kafka_identity(inst, cluster)
            added = inst.in_kafka_txn.setdefault(cluster, set())
            if partition not in added:
                self.clusters[cluster].add_partition(ktid, pid, epoch, partition)
                added.add(partition)
            if refused:
                raise KafkaInvalidState()
            self.clusters[cluster].produce(ktid, pid, epoch, partition, rid)
        except (Down, KafkaFenced, KafkaInvalidState):
            self.failed_write(inst)

    def failed_write(self, inst: Instance) -> None:
        """A message of ``inst``'s transaction was not written (the SDK's failed delivery report)."""
        inst.failed = True

    def may_commit(self, inst: Instance) -> bool:
        """The SDK's flush before the decision: every message written, every participant reachable."""
        return not inst.failed and all(self.clusters[c].up for c in inst.clusters)

    @precondition(lambda self: any(not i.dead and i.state == "open" for i in self.instances))
    @rule(index=st.integers(0, 7), commit=st.booleans(), stale=st.booleans(), reply_lost=st.booleans())
    def decide(self, index: int, commit: bool, stale: bool, reply_lost: bool) -> None:
        inst = self._live(index, "open")
        if inst is None:
            return
        commit = commit and self.may_commit(inst)
        inst.ending = True
        result = self.command(
            commands.end_transaction, inst.tid, inst.pid, inst.epoch, inst.sequence, commit, self.now_ms, stale=stale
        )
        if result is None:
            producer = self.txns.producers[inst.tid]
            inst.dead = (producer.producer_id, producer.epoch) != (inst.pid, inst.epoch)
        elif not reply_lost:
            inst.state, inst.commit = "decided", commit

    @precondition(lambda self: any(not i.dead and i.state == "decided" for i in self.instances))
    @rule(index=st.integers(0, 7), cluster=st.sampled_from(CLUSTERS))
    def complete(self, index: int, cluster: str) -> None:
        """The owner ends its part on ``cluster`` as decided; once all are ended it may start the next."""
        inst = self._live(index, "decided")
        if inst is None or cluster not in inst.clusters - inst.completed:
            return
        if cluster in inst.in_kafka_txn:
            pid, epoch = inst.kafka[cluster]
            try:
                self.clusters[cluster].end_txn(
                    T.participant_transactional_id(inst.tid, cluster), pid, epoch, inst.commit
                )
            except Down:
                return
            except (KafkaFenced, KafkaInvalidState):
                inst.dead = True  # the driver took over: this instance is done
                return
        inst.completed.add(cluster)
        if inst.completed == inst.clusters:
            inst.sequence += 1
            inst.state, inst.failed, inst.ending, inst.registered, inst.in_kafka_txn = "idle", False, False, set(), {}

    @rule(index=st.integers(0, 7))
    def crash_producer(self, index: int) -> None:
        inst = self._live(index)
        if inst is not None:
            inst.dead = True

    # -- the coordinator ------------------------------------------------------------------------------
    @rule(ms=st.sampled_from([10, 100, 300, 1500]))
    def tick(self, ms: int) -> None:
        self.now_ms += ms
        self.append(expire(self.txns, self.now_ms))

    @precondition(lambda self: bool(T.completion_tasks(self.txns)))
    @rule(pick=st.integers(0, 7))
    def drive_plan(self, pick: int) -> None:
        """The participant driver takes a task; it checks and acts in later steps (it may be slow, or an old
        leader's), so anything may happen in between."""
        tasks = T.completion_tasks(self.txns)
        if tasks and len(self.jobs) < 6:
            self.jobs.append(Job(tasks[pick % len(tasks)]))

    def _pending(self, task: T.CompletionTask) -> bool:
        txn = self.txns.producers[task.transactional_id].txn
        key = (task.producer_id, task.epoch, task.sequence)
        return txn is not None and (txn.producer_id, txn.epoch, txn.sequence) == key and task.cluster_id in txn.pending

    @precondition(lambda self: any(j.seen is None for j in self.jobs))
    @rule(pick=st.integers(0, 7))
    def drive_check(self, pick: int) -> None:
        """DescribeTransactions on the participant, then a linearizable read of the log (a barrier): the task
        must still be pending *after* the describe, so what it saw is the decided transaction's."""
        waiting = [j for j in self.jobs if j.seen is None]
        if not waiting:
            return
        job = waiting[pick % len(waiting)]
        ktid = T.participant_transactional_id(job.task.transactional_id, job.task.cluster_id)
        try:
            k = self.clusters[job.task.cluster_id].describe(ktid)
        except Down:
            return
        if not self._pending(job.task):
            self.jobs.remove(job)
            return
        job.seen = (k.pid, k.epoch, k.open) if k is not None else (-1, -1, False)

    @precondition(lambda self: any(j.seen is not None for j in self.jobs))
    @rule(pick=st.integers(0, 7))
    def drive_act(self, pick: int) -> None:
        """End the part as decided with the producer id and epoch seen (a commit by EndTxn), fence them
        (InitProducerId with KIP-360's expected id and epoch, which also aborts), and log the completion."""
        ready = [j for j in self.jobs if j.seen is not None]
        if ready:
            self._act(ready[pick % len(ready)])

    def _act(self, job: Job) -> None:
        task, seen = job.task, job.seen
        assert seen is not None
        participant = self.clusters[task.cluster_id]
        ktid = T.participant_transactional_id(task.transactional_id, task.cluster_id)
        pid, epoch, was_open = seen
        try:
            if task.commit and was_open:
                participant.end_txn(ktid, pid, epoch, True)
            if pid >= 0:
                participant.init_pid(ktid, expect=(pid, epoch))
        except Down:
            return
        except (KafkaFenced, KafkaInvalidState):
            pass  # somebody moved the participant on since the check: this job is stale
        self.jobs.remove(job)
        self.command(
            commands.complete_participants, task.transactional_id, task.producer_id, task.epoch, task.sequence,
            [task.cluster_id],
        )  # fmt: skip

    def _drive_dry(self) -> bool:
        """Run every task to its end (quiescing: nothing else moves meanwhile); whether there was any."""
        self.jobs.clear()
        tasks = T.completion_tasks(self.txns)
        for task in tasks:
            self.jobs.append(job := Job(task))
            self.drive_check(len(self.jobs) - 1)
            if job in self.jobs and job.seen is not None:
                self._act(job)
            self.jobs.clear()
        return bool(tasks)

    @rule()
    def fail_over(self) -> None:
        """A new leader: the state is what the log replays to."""
        rebuilt = T.replay(T.EMPTY_TRANSACTIONS, self.log)
        assert rebuilt == self.txns
        self.txns = self.previous = rebuilt

    # -- participants ---------------------------------------------------------------------------------
    @rule(cluster=st.sampled_from(CLUSTERS))
    def toggle_cluster(self, cluster: str) -> None:
        self.clusters[cluster].up = not self.clusters[cluster].up

    # -- what must hold -------------------------------------------------------------------------------
    @invariant()
    def only_committed_transactions_are_visible(self) -> None:
        for c in self.clusters.values():
            for rid in c.visible:
                key = self.owner_of[rid]
                assert self.decisions.get(key) is True, f"{rid} of {key} is visible, decision {self.decisions.get(key)}"

    @invariant()
    def a_snapshot_replays_to_the_state(self) -> None:
        assert T.replay(T.EMPTY_TRANSACTIONS, T.snapshot_records(self.txns)) == self.txns

    def teardown(self) -> None:
        self.quiesce()

    def quiesce(self) -> None:
        """Every cluster up, every instance gone, the clock past every timeout and grace, the driver run
        dry: then each transaction is complete, and entirely visible or entirely invisible."""
        for c in self.clusters.values():
            c.up = True
        for inst in self.instances:
            inst.dead = True
        for _ in range(20):
            self.now_ms += TIMEOUT_MS + GRACE_MS
            self.append(expire(self.txns, self.now_ms))
            busy = self._drive_dry()
            if not busy and not expire(self.txns, self.now_ms + TIMEOUT_MS + GRACE_MS):
                break
        incomplete = [p.txn for p in self.txns.producers.values() if p.txn is not None and not p.txn.complete]
        assert not incomplete, f"incomplete after quiescing: {incomplete}"
        visible = set().union(*(c.visible for c in self.clusters.values()))
        by_txn: dict[TxnKey, set[str]] = {}
        for rid, key in self.owner_of.items():
            by_txn.setdefault(key, set()).add(rid)
        for key, rids in by_txn.items():
            seen = rids & visible
            assert seen in (set(), rids), f"{key} is torn: {sorted(seen)} of {sorted(rids)} visible"
            assert bool(seen) == self.decisions.get(key, False), f"{key}: decided {self.decisions.get(key)}"
        assert T.replay(T.EMPTY_TRANSACTIONS, self.log) == self.txns


TestTransactionModel = TxnMachine.TestCase
TestTransactionModel.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


# -- the model can fail: one planted bug each ------------------------------------------------------
FIND_BUG = settings(PLANTED, max_examples=600, stateful_step_count=60)


def _finds_a_bug(machine: type[RuleBasedStateMachine], match: str) -> None:
    finds_a_bug(machine, match, FIND_BUG)


def test_the_model_finds_a_commit_that_ignores_a_failed_write() -> None:
    class CommitDespiteAFailedWrite(TxnMachine):
        def may_commit(self, inst: Instance) -> bool:  # the bug: only the participants' reachability
            return all(self.clusters[c].up for c in inst.clusters)

    _finds_a_bug(CommitDespiteAFailedWrite, "torn|decided True")


def test_the_model_finds_a_coordinator_that_never_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "expire_transactions", lambda image, now_ms, grace_ms: commands.Result((), None))
    _finds_a_bug(TxnMachine, "incomplete after quiescing")


def test_the_model_finds_a_driver_that_commits_an_aborted_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = T.completion_tasks

    def committing(txns: T.Transactions) -> tuple[T.CompletionTask, ...]:  # the bug: every part is committed
        return tuple(dataclasses.replace(task, commit=True) for task in tasks(txns))

    monkeypatch.setattr(T, "completion_tasks", committing)
    _finds_a_bug(TxnMachine, "is visible, decision False|torn|decided False")


def test_the_driver_leaves_a_live_owner_alone_since_ending_its_transaction_could_end_its_next_one() -> None:
    """Kafka keeps a librdkafka producer's epoch across transactions: a driver that ended a live owner's
    decided transaction by its producer id and epoch could commit the owner's next, undecided one. (The
    model's random steps rarely line this up: ``completion_tasks`` listing owned transactions fails this
    test, not the model.)"""
    m = TxnMachine()
    m.init("a", reply_lost=False)
    m.produce(0, "c1", 0)
    m.decide(0, commit=True, stale=False, reply_lost=False)
    m.drive_plan(0)  # the owner is not fenced: the driver plans nothing for it
    m.drive_check(0)
    m.complete(0, "c1")  # the owner ends it and starts its next transaction on the same cluster
    m.produce(0, "c1", 0)
    if m.jobs:
        m.drive_act(0)
    visible = m.clusters["c1"].visible
    assert {m.owner_of[rid][3] for rid in visible} == {0}, "the next transaction became visible undecided"


def test_a_fenced_owner_hands_its_decided_transaction_to_the_driver() -> None:
    m = TxnMachine()
    m.init("a", reply_lost=False)
    m.produce(0, "c1", 0)
    m.produce(0, "c2", 1)
    m.decide(0, commit=True, stale=False, reply_lost=False)
    m.complete(0, "c1")
    m.crash_producer(0)  # before ending its part on c2
    m.tick(GRACE_MS + 1)
    # c1 too: the owner reports its own completions with its next registration, which never came
    assert [t.cluster_id for t in T.completion_tasks(m.txns)] == ["c1", "c2"]
    m.quiesce()
    assert m.clusters["c2"].visible == {"r1"}
