"""The replicated state machine: contiguous offsets, atomic proposals, idempotency, never raising, dumps."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from metadata_log import heap as heap_module
from metadata_log.codec import CodecError, _round_trips, pack, unpack
from metadata_log.heap import freeze_survivors, gc_paused
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.publisher import LogDelta
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    GroupGenerationStarted,
    MetadataVersionChanged,
    NewerMetadataVersion,
    NoOp,
    PartitionsAdded,
    PartitionStateChanged,
    Record,
    TopicCreated,
)
from metadata_quorum import state as state_module
from metadata_quorum.state import (
    MAX_IDEMPOTENCY_KEYS,
    CorruptState,
    LogState,
    Proposal,
    _ProposedCommands,
    decode_command,
    encode_command,
    unframe,
)
from tests.unit.samples import ONE_OF_EACH


class Collected:
    """A publisher that keeps (offset, record) of each record it is given, and each snapshot delta's image."""

    def __init__(self) -> None:
        self.records: list[tuple[int, Record]] = []
        self.snapshots: list[MetadataImage] = []

    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        if delta.snapshot:
            self.snapshots.append(image)
        self.records.extend(enumerate(delta.records, delta.first_offset))


def collecting_state() -> tuple[LogState, list[tuple[int, Record]]]:
    published = Collected()
    return LogState(published), published.records


def test_group_of_proposals_gets_contiguous_offsets() -> None:
    state, published = collecting_state()
    outcomes = state.apply_command(
        encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"),)), Proposal((NoOp(), NoOp()))])
    )
    assert [(o.status, o.first_offset, o.last_offset) for o in outcomes] == [("committed", 0, 0), ("committed", 1, 2)]
    assert [o for o, _ in published] == [0, 1, 2]
    assert state.image.offset == 2


def test_a_rejected_proposal_changes_nothing_and_takes_no_offsets() -> None:
    state, published = collecting_state()
    good = Proposal((ClusterRegistered("c1", "r1", "h:1"),))
    bad = Proposal((TopicCreated("i", "t", "r1"), PartitionsAdded("t", 0, "missing", "t", 0)))
    after = Proposal((NoOp(),))
    outcomes = state.apply_command(encode_command([good, bad, after]))
    assert [o.status for o in outcomes] == ["committed", "rejected", "committed"]
    assert "not registered" in outcomes[1].detail
    assert "t" not in state.image.topics
    assert [o for o, _ in published] == [0, 1]
    assert outcomes[2].first_offset == 1


def test_idempotency_key_commits_once_and_replays_the_first_outcome() -> None:
    state, published = collecting_state()
    p = Proposal((ClusterRegistered("c1", "r1", "h:1"),), idempotency_key="k", fingerprint="f")
    first = state.apply_command(encode_command([p]))[0]
    again = state.apply_command(encode_command([p, p]))
    assert first.status == "committed"
    assert [(o.status, o.last_offset) for o in again] == [("duplicate", 0), ("duplicate", 0)]
    assert len(published) == 1
    reused = Proposal((NoOp(),), idempotency_key="k", fingerprint="other")
    assert state.apply_command(encode_command([reused]))[0].status == "key_reused"
    assert state.outcome_for_key("k") == ("f", first)


def test_idempotency_window_is_bounded_and_forgets_oldest_first() -> None:
    state = LogState()
    batch = [Proposal((), idempotency_key=f"k{i}", fingerprint="f") for i in range(MAX_IDEMPOTENCY_KEYS + 5)]
    state.apply_command(encode_command(batch))
    assert state.outcome_for_key("k0") is None
    assert state.outcome_for_key("k4") is None
    assert state.outcome_for_key("k5") is not None


# records that apply or not depending on what came before (each one is valid in some state)
_POOL = (
    ClusterRegistered("c1", "r1", "h:1"),
    ClusterRegistered("c1", "r1", "h:2"),
    ClusterRegistered("c1", "r2", "h:1"),
    ClusterRegistered("c2", "r1", "h:3"),
    ClusterStateChanged("c1", "read_only"),
    ClusterStateChanged("c1", "active"),
    ClusterFenced("c1", "down", 1),
    ClusterUnfenced("c1", 2),
    TopicCreated("i", "t", "r1"),
    PartitionsAdded("t", 0, "c1", "t", 0),
    PartitionsAdded("t", 1, "c2", "t", 0),
    PartitionStateChanged("t", 0, "read_only"),
    NoOp(),
)
_PROPOSALS = st.builds(
    Proposal,
    st.lists(st.sampled_from(_POOL), max_size=3).map(tuple),
    st.sampled_from([None, "k0", "k1", "k2", "k3"]),
    st.sampled_from(["f", "g"]),
)


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(_PROPOSALS, max_size=6),
    group=st.lists(_PROPOSALS, min_size=2, max_size=8),
    max_keys=st.sampled_from([2, 3, MAX_IDEMPOTENCY_KEYS]),
    version=st.sampled_from([1, 2]),
)
@example(  # k0 is remembered, but the group's first write pushes it out before the group uses it again
    before=[Proposal((NoOp(),), "k0", "f"), Proposal((NoOp(),), "k1", "f")],
    group=[Proposal((NoOp(),), "k2", "f"), Proposal((NoOp(),), "k0", "f")],
    max_keys=2,
    version=1,
)
def test_a_group_of_proposals_does_what_they_do_one_command_each(
    before: list[Proposal], group: list[Proposal], max_keys: int, version: int
) -> None:
    # A command of many proposals is applied with one apply() when they all commit; outcomes, offsets, image,
    # remembered keys and published records must be exactly those of applying them one at a time. In
    # version 2, a follower applies the records' runs and builds the records only for the publisher.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_module, "MAX_IDEMPOTENCY_KEYS", max_keys)
        together, published_together = collecting_state()
        one_by_one, published_one_by_one = collecting_state()
        for proposal in before:
            together.apply_command(encode_command([proposal], version))
            one_by_one.apply_command(encode_command([proposal], version))
        outcomes = together.apply_command(encode_command(group, version))
        expected = [one_by_one.apply_command(encode_command([proposal], version))[0] for proposal in group]
    assert outcomes == expected
    assert together.image == one_by_one.image
    assert list(together._keys.items()) == list(one_by_one._keys.items())
    assert published_together == published_one_by_one


def test_a_group_that_all_commits_is_applied_in_one_go(monkeypatch: pytest.MonkeyPatch) -> None:
    def one_at_a_time(*args: object) -> None:
        raise AssertionError("applied one proposal at a time")

    monkeypatch.setattr(LogState, "_apply_proposal", one_at_a_time)
    state, published = collecting_state()
    group = [Proposal((ClusterRegistered(f"c{i}", "r1", f"h:{i + 1}"),), f"k{i}", "f") for i in range(3)]
    outcomes = state.apply_command(encode_command([*group, group[0], Proposal((NoOp(),), "k1", "other")]))
    assert [o.status for o in outcomes] == ["committed"] * 3 + ["duplicate", "key_reused"]
    assert [o for o, _ in published] == [0, 1, 2]


def test_a_group_falls_back_to_one_at_a_time_only_when_its_apply_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a failed ``apply`` of the whole group (nothing changed yet) sends it down the one-at-a-time path;
    an error after the image advanced must not, or the group would be applied twice."""
    state, _ = collecting_state()
    calls = 0

    def forget_failing_once(self: LogState) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in the keys' bookkeeping")

    monkeypatch.setattr(LogState, "_forget_oldest_keys", forget_failing_once)
    command = encode_command([Proposal((NoOp(),), "k1", "f"), Proposal((NoOp(),), "k2", "f")])
    with pytest.raises(RuntimeError, match="bookkeeping"):
        state.apply_command(command)
    assert state.image.offset == 1  # the two records once, not again one at a time
    monkeypatch.setattr(state_module, "apply_touched", lambda image, runs: (_ for _ in ()).throw(ValueError("bug")))
    assert [o.status for o in state.apply_command(command)] == ["duplicate", "duplicate"]


@pytest.mark.parametrize(
    "data", [b"", b"\xc1", b"\x93\x01\x02\x03", encode_command([])[:-1], b"\x92\x01\x91\x93\x00\x00\x90"]
)
def test_garbage_commands_never_raise(data: bytes) -> None:
    state, published = collecting_state()
    outcomes = state.apply_command(data)
    assert all(o.status == "rejected" for o in outcomes)
    assert state.image == EMPTY_IMAGE
    assert published == []


def test_a_publisher_failure_does_not_stop_apply() -> None:
    class Boom:
        def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
            raise RuntimeError("publisher bug")

    state = LogState(Boom())
    assert state.apply_command(encode_command([Proposal((NoOp(),))]))[0].status == "committed"
    assert state.image.offset == 0


def test_dump_and_load_round_trip() -> None:
    state = LogState()
    state.apply_command(encode_command([Proposal(tuple(ONE_OF_EACH), "key-1", "fp")]))
    data = state.dump({"last": [b"cmd", 7, 2]})
    loaded, published = LogState(), Collected()
    loaded.subscribe(published)
    assert loaded.load(data) == {"last": [b"cmd", 7, 2]}
    assert loaded.image == state.image == apply(EMPTY_IMAGE, ONE_OF_EACH)
    assert loaded.outcome_for_key("key-1") == state.outcome_for_key("key-1")
    resets = [(image.offset + 1, published.records, image.offset) for image in published.snapshots]
    assert resets == [(len(ONE_OF_EACH), [], len(ONE_OF_EACH) - 1)]
    assert "runs" in unpack(unframe(data))  # the log is at metadata version 2: the image goes as runs


def test_a_dump_at_metadata_version_1_holds_rows_every_version_reads() -> None:
    state = LogState()
    state.apply_command(encode_command([Proposal(tuple(r for r in ONE_OF_EACH if r.TYPE != "MetadataVersionChanged"))]))
    assert state.image.metadata_version == 1
    data = state.dump(None)
    assert set(unpack(unframe(data))) == {"offset", "records", "keys", "raft"}
    loaded = LogState()
    loaded.load(data)
    assert loaded.image == state.image


def test_survivors_are_frozen_out_of_collections_after_enough_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """A big image is millions of tracked objects that every full collection would walk again (a pause that
    costs leadership): after FREEZE_EVERY_RECORDS applied records, and after a load, what is alive is frozen."""
    monkeypatch.setattr(state_module, "FREEZE_EVERY_RECORDS", 3)
    gc.unfreeze()
    try:
        state, _ = collecting_state()
        state.apply_command(encode_command([Proposal((NoOp(), NoOp()))]))
        assert gc.get_freeze_count() == 0
        state.apply_command(encode_command([Proposal((NoOp(),))]))
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert state.image.offset == 2  # frozen objects are still alive and used as before

        gc.unfreeze()
        with gc_paused():  # another thread encoding a dump: no collection, no freeze; retried later
            assert not freeze_survivors()
            state.apply_command(encode_command([Proposal((NoOp(), NoOp(), NoOp()))]))
            assert gc.get_freeze_count() == 0
        state.apply_command(encode_command([Proposal((NoOp(),))]))
        assert gc.get_freeze_count() > 0

        gc.unfreeze()
        loaded = LogState()
        loaded.load(state.dump({}))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_pause_that_begins_while_survivors_are_frozen_waits_for_the_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    """freeze_survivors checked for a pause, then collected and froze: a pause that began in between (another
    thread starting to decode a snapshot) had its half-built objects walked and frozen."""
    events: list[str] = []
    collecting, trying, proceed = threading.Event(), threading.Event(), threading.Event()

    class SlowGC:  # the collector, with a collection that lasts until the test lets it end
        isenabled, disable, enable = gc.isenabled, gc.disable, gc.enable

        @staticmethod
        def collect() -> int:
            events.append("collect")
            collecting.set()
            proceed.wait(10)
            return 0

        @staticmethod
        def freeze() -> None:
            events.append("freeze")

    def pause() -> None:
        collecting.wait(10)
        trying.set()
        with gc_paused():
            events.append("paused")

    monkeypatch.setattr(heap_module, "gc", SlowGC)
    other = threading.Thread(target=pause)
    other.start()
    freezing = threading.Thread(target=freeze_survivors)
    freezing.start()
    assert trying.wait(10)
    time.sleep(0.05)  # room for the other thread to reach the pause (it must wait)
    proceed.set()
    freezing.join(10)
    other.join(10)
    assert events == ["collect", "freeze", "paused"]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: d[:-10], "truncated"),
        (lambda d: d[:10], "shorter than its header"),
        (lambda d: d[:30] + bytes([d[30] ^ 0xFF]) + d[31:], "checksum"),
        (lambda d: b"NOTKFED!" + d[8:], "bad magic"),
    ],
)
def test_damaged_dumps_are_detected(damage, message: str) -> None:
    state = LogState()
    state.apply_command(encode_command([Proposal(tuple(ONE_OF_EACH))]))
    with pytest.raises(CorruptState, match=message):
        LogState().load(damage(state.dump(None)))


def test_a_proposer_applies_its_own_command_as_its_followers_decode_it() -> None:
    """The leader takes back the proposals it encoded instead of decoding its own command: only when
    decoding would give exactly them (every record kind but group generations, plain field types)."""
    records = tuple(r for r in ONE_OF_EACH if not isinstance(r, GroupGenerationStarted))
    assert _round_trips(records)
    assert all(_round_trips([r]) == (type(r) is not GroupGenerationStarted) for r in ONE_OF_EACH)
    proposals = [Proposal(records, "k", "f"), Proposal((NoOp(),))]
    leader, follower = LogState(), LogState()
    data = leader.encode_proposal(proposals)
    assert data == encode_command(proposals)
    taken = leader._proposed.take(data)
    assert taken is not None
    assert [write.proposal() for write in taken] == proposals
    assert decode_command(data) == proposals
    leader.encode_proposal(proposals)
    assert leader.apply_command(data) == follower.apply_command(data)
    assert leader.image == follower.image and leader._proposed.take(data) is None


def test_a_command_too_big_for_any_node_to_decode_is_not_applied_by_its_proposer_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proposer applied its own commands from the proposals it kept, without decoding them: one above the
    codec's limit committed on the leader and was rejected as undecodable by every follower."""
    monkeypatch.setattr(state_module, "MAX_DECODE_BYTES", 1000)
    monkeypatch.setattr("metadata_log.codec.MAX_DECODE_BYTES", 1000)
    proposals = [Proposal((ClusterRegistered("c1", "r1", "h" * 2000 + ":1"),))]
    leader, follower = LogState(), LogState()
    data = leader.encode_proposal(proposals)
    assert len(data) > 1000
    assert leader.apply_command(data) == follower.apply_command(data)
    assert follower.apply_command(data)[0].status == "rejected" and leader.image == follower.image


def test_a_follower_publishes_the_records_its_leader_proposed() -> None:
    """In metadata version 2 a follower applies a command's runs as columns; the records it publishes are
    built from them and equal the leader's, at the same offsets."""
    raise_version = encode_command([Proposal((MetadataVersionChanged(LATEST_METADATA_VERSION),))])
    (leader, led), (follower, followed) = collecting_state(), collecting_state()
    for state in (leader, follower):
        state.apply_command(raise_version)
    records = tuple(r for r in ONE_OF_EACH if not isinstance(r, GroupGenerationStarted))
    registrations = tuple(ClusterRegistered(f"n{i}", "r1", f"h:{i}") for i in range(10))
    topic = (  # runs of a type applied a run at a time, then of one applied record by record
        TopicCreated("id-x", "x", "r1"),
        *(PartitionsAdded("x", i, "n0", "x", i) for i in range(5)),
        *(PartitionStateChanged("x", i, "read_only") for i in range(1, 4)),
        ClusterRegistered("n0", "r1", "h:0"),
    )
    proposals = [
        Proposal(records, "k", "f"),
        Proposal(registrations),
        Proposal(registrations, "again"),
        Proposal(topic),
    ]
    data = leader.encode_proposal(proposals)
    assert unpack(data)[0] == LATEST_METADATA_VERSION
    assert leader._proposed._by_command  # the leader applies what it encoded, not its command decoded
    assert leader.apply_command(data) == follower.apply_command(data)
    assert leader.image == follower.image
    assert [p.state for p in leader.image.topics["x"].partitions] == ["writable", *["read_only"] * 3, "writable"]
    expected = [*records, *registrations, *registrations, *topic]
    assert led == followed and [r for _, r in followed[1:]] == expected


class _Text(str):
    pass


@pytest.mark.parametrize(
    "record",
    [
        PartitionsAdded("t", True, "c1", "t", 0),  # a bool where an int is declared: followers refuse it
        PartitionsAdded("t", 0, _Text("c1"), "t", 0),  # a str subclass: decoded as a plain str
        ClusterRegistered("c1", "r1", None),  # type: ignore[arg-type]  # None where a str is declared
    ],
)
def test_records_that_would_not_decode_unchanged_are_decoded_on_the_proposer_too(record: Record) -> None:
    assert not _round_trips([record])
    leader, follower = LogState(), LogState()
    setup = encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"), TopicCreated("i", "t", "r1")))])
    for state in (leader, follower):
        state.apply_command(setup)
    data = leader.encode_proposal([Proposal((record,))])
    assert leader._proposed.take(data) is None
    assert leader.apply_command(data) == follower.apply_command(data)
    assert leader.image == follower.image


def test_a_command_proposed_twice_is_taken_back_by_each_of_its_commits() -> None:
    leader = LogState()
    proposals = [Proposal((NoOp(),))]
    data = leader.encode_proposal(proposals)
    assert leader.encode_proposal(proposals) == data  # the same bytes in flight twice (no key, same records)
    for _ in range(2):
        taken = leader._proposed.take(data)
        assert taken is not None and [write.proposal() for write in taken] == proposals
    assert leader._proposed.take(data) is None


def test_kept_proposals_are_bounded_by_bytes_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ProposedCommands, "MAX_BYTES", 100)
    kept = _ProposedCommands()
    commands = [encode_command([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]) for i in range(10)]
    for data in commands:
        kept.add(data, state_module._decode_writes(data))
    fit = 100 // len(commands[0])  # all commands have the same size here
    assert [kept.take(d) is not None for d in commands] == [False] * (10 - fit) + [True] * fit


def test_commands_of_both_metadata_versions_decode_to_the_same_proposals() -> None:
    proposals = [
        Proposal(tuple(ONE_OF_EACH), "k", "f"),
        Proposal((TopicCreated("i", "t", "r1"), *(PartitionsAdded("t", i, "c1", "t", i) for i in range(100)))),
        Proposal(()),
    ]
    rows, runs = encode_command(proposals, 1), encode_command(proposals, 2)
    assert unpack(rows)[0] == 1 and unpack(runs)[0] == 2
    assert len(runs) < len(rows) / 2
    assert decode_command(rows) == decode_command(runs) == proposals
    for version in (3, 4):  # versions 3 and 4 add record types, not a layout
        same = encode_command(proposals, version)
        assert unpack(same) == [version, unpack(runs)[1]] and decode_command(same) == proposals
    with pytest.raises(NewerMetadataVersion, match="metadata version 5 is newer than this kfed reads"):
        decode_command(pack([5, []]))
    with pytest.raises(CodecError, match="a command of metadata version 0"):
        decode_command(pack([0, []]))
    with pytest.raises(ValueError, match="no command layout"):
        encode_command(proposals, 5)


def test_the_leader_writes_commands_in_the_version_the_log_has_reached() -> None:
    state = LogState()
    first = state.encode_proposal([Proposal((NoOp(),))])
    assert unpack(first)[0] == 1  # a new log: version 1 until every voter is known to read 2
    state.apply_command(first)
    state.apply_command(state.encode_proposal([Proposal((MetadataVersionChanged(2),))]))
    assert state.image.metadata_version == 2
    run = [Proposal(tuple(PartitionsAdded("t", i, "c1", "t", i) for i in range(3)))]
    assert unpack(state.encode_proposal(run)) == [
        2,
        [[None, None, [[3, "PartitionsAdded", 0, ["t"], [0, 1, 2], ["c1"], ["t"], [0, 1, 2]]]]],
    ]


class Halted(Exception):
    """What the test's ``halt`` raises: the node stopped there."""


def halting_state() -> tuple[LogState, list[str]]:
    reasons: list[str] = []

    def halt(reason: str) -> None:
        reasons.append(reason)
        raise Halted(reason)

    return LogState(halt=halt), reasons


def test_a_committed_command_of_a_newer_metadata_version_stops_the_node_instead_of_being_skipped() -> None:
    state, reasons = halting_state()
    state.apply_command(encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"),))]))
    before = state.image
    with pytest.raises(Halted):
        state.apply_command(pack([5, [[None, None, []]]]))
    assert state.image is before
    assert reasons == [
        "the log holds a committed command this node cannot apply: "
        "metadata version 5 is newer than this kfed reads (up to 4): upgrade it"
    ]


def test_a_committed_raise_to_a_newer_metadata_version_stops_the_node() -> None:
    state, reasons = halting_state()
    with pytest.raises(Halted):
        state.apply_command(encode_command([Proposal((NoOp(),)), Proposal((MetadataVersionChanged(5),))]))
    assert len(reasons) == 1 and "metadata version 5 is newer" in reasons[0]
    # a version this node reads still applies, and a version going back is refused like any record that does
    # not fit (the same on every node)
    state, reasons = halting_state()
    state.apply_command(encode_command([Proposal((MetadataVersionChanged(2),))]))
    outcomes = state.apply_command(encode_command([Proposal((MetadataVersionChanged(1),))], 2))
    assert (outcomes[0].status, state.image.metadata_version, reasons) == ("rejected", 2, [])


def test_a_dump_of_a_newer_metadata_version_stops_the_node() -> None:
    state = LogState()
    state.image = MetadataImage(7, {}, {}, {}, metadata_version=5)  # as a newer kfed would have dumped it
    data = state.dump({"raft": "internal"})
    reader, reasons = halting_state()
    with pytest.raises(Halted):
        reader.load(data)
    assert len(reasons) == 1 and "metadata version 5 is newer than this kfed reads" in reasons[0]
    assert reader.image == EMPTY_IMAGE


def test_the_default_halt_ends_the_process_with_its_status_and_says_why() -> None:
    script = (
        "import logging; logging.basicConfig();"
        "from metadata_log.codec import pack; from metadata_quorum.state import LogState;"
        "LogState().apply_command(pack([5, []])); print('went on')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == state_module.HALT_EXIT_STATUS == 3
    assert "went on" not in done.stdout
    assert "stopping this node: the log holds a committed command this node cannot apply" in done.stderr


def test_a_late_subscriber_first_catches_up_from_the_empty_image_then_gets_every_update() -> None:
    state, early = collecting_state()
    state.apply_command(encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"), NoOp()))]))
    late = Collected()
    state.subscribe(late)
    assert late.snapshots == [state.image] and late.records == []  # the catch-up: the image, no records
    state.apply_command(encode_command([Proposal((NoOp(),))]))
    assert late.records == [(2, NoOp())] and early == [
        (0, ClusterRegistered("c1", "r1", "h:1")),
        (1, NoOp()),
        *late.records,
    ]
    fresh = Collected()
    LogState().subscribe(fresh)
    assert fresh.snapshots == [] and fresh.records == []  # nothing to catch up on


def test_a_raft_follower_without_publishers_never_builds_the_records_of_its_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A follower applies a command of runs as columns; building its records is only for publishers.
    def built(*args: object) -> None:
        raise AssertionError("records built for nobody")

    raise_version = encode_command([Proposal((MetadataVersionChanged(LATEST_METADATA_VERSION),))])
    topic = (ClusterRegistered("c1", "r1", "h:1"), TopicCreated("i", "t", "r1"))
    partitions = tuple(PartitionsAdded("t", i, "c1", "t", i) for i in range(5))
    follower = LogState()
    follower.apply_command(raise_version)  # a command of version 1: rows, decoded as records
    monkeypatch.setattr(state_module, "records_of", built)
    commands = [encode_command([Proposal(topic)], 2), encode_command([Proposal(partitions)], 2)]
    assert [follower.apply_command(data)[0].status for data in commands] == ["committed"] * 2
    assert len(follower.image.topics["t"].partitions) == 5


def test_a_dump_above_a_clients_decode_limit_loads_up_to_the_dump_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100 M-partition image dumps to ~100 MiB, above what a client's body may hold (``MAX_DECODE_BYTES``): a
    node loads its own dump (or its leader's) up to ``MAX_DUMP_BYTES``, and refuses one past it."""
    from metadata_log.codec import MAX_DECODE_BYTES

    state = LogState()
    state.apply_command(encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"),))]))
    big = state.dump({"padding": bytes(MAX_DECODE_BYTES + 1)})  # pysyncobj's part of a dump is opaque here
    reader = LogState()
    assert reader.load(big) == {"padding": bytes(MAX_DECODE_BYTES + 1)} and reader.image == state.image
    monkeypatch.setattr(state_module, "MAX_DUMP_BYTES", MAX_DECODE_BYTES)
    with pytest.raises(CorruptState, match="exceeds"):
        LogState().load(big)
