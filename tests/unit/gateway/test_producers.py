"""The gateway's producer bookkeeping (``gateway/producers.py``): which client producer ids it takes, which
batches a physical producer id takes, and the sequence the gateway keeps for a strict topic's regrouped
batches."""

from __future__ import annotations

import struct
import zlib
from array import array
from concurrent.futures import Future
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gateway.producers import (
    CLIENT_ID_BASE,
    COUNTER_BITS,
    COUNTER_MASK,
    DROP,
    MAX_INCARNATION,
    PhysicalProducer,
    ProducerIds,
    ProducerIdsExhausted,
    StrictBatch,
    StrictSequence,
)
from kafka_wire import batches
from kafka_wire.batches import SlotTargets
from kafka_wire.protocol import ErrorCode
from metadata_log.keymap import KEY_SLOTS, SLOT_MASK


def test_a_physical_producer_takes_its_first_batch_the_next_one_or_a_recent_resend_and_nothing_else() -> None:
    p = PhysicalProducer(7, 0)
    assert p.follows(5, 9) and p.shift == 5, "the client's first sequence here is the broker's 0"
    assert p.follows(10, 10) and p.follows(11, 14)
    assert p.follows(5, 9), "a resend of a recent batch goes through (the broker deduplicates it)"
    assert not p.follows(16, 17), "a gap: the client went on elsewhere"
    assert not p.follows(6, 9), "an old sequence that was never a batch of this producer"
    for start in range(15, 15 + 5):
        assert p.follows(start, start)
    assert not p.follows(5, 9), "a batch older than the last five is not a resend"


def test_a_strict_topics_client_sequence_writes_in_order_answers_resends_and_refuses_the_rest() -> None:
    """What a broker does for an idempotent producer, kept by the gateway for strict topics' regrouped batches."""
    s = StrictSequence()
    assert s.verdict(5, 9) is None, "a first batch here starts the sequence wherever the client is"
    s.written(5, 9)
    assert s.verdict(10, 12) is None
    assert s.verdict(5, 9) == ErrorCode.none, "a resend of a written batch: answered, not written again"
    assert s.verdict(13, 14) == ErrorCode.out_of_order_sequence_number, "a gap: the client sends again in order"
    s.refused(10)
    assert s.verdict(13, 14) == ErrorCode.out_of_order_sequence_number, "a refused batch is not skipped"
    fresh = StrictSequence()
    fresh.refused(20)
    assert fresh.verdict(25, 30) == ErrorCode.out_of_order_sequence_number, "a refused first batch goes first"
    assert fresh.verdict(20, 24) is None


def test_only_ids_a_gateway_of_the_federation_minted_are_taken() -> None:
    ids = ProducerIds()
    ids.incarnation = 7
    first, second = ids.mint(), ids.mint()
    assert ids.minted(first, next_incarnation=8) and ids.minted(second, next_incarnation=8)
    assert not ids.minted(second + 1, next_incarnation=8), "this process's, above the last it handed out"
    other = CLIENT_ID_BASE | 5 << COUNTER_BITS | 123
    assert ids.minted(other, next_incarnation=8), "another registration's, any of its counter"
    later = CLIENT_ID_BASE | 8 << COUNTER_BITS | 1
    assert not ids.minted(later, next_incarnation=8) and ids.minted(later, next_incarnation=9), (
        "an incarnation the log has not registered yet"
    )
    assert not ids.minted(CLIENT_ID_BASE | 5 << COUNTER_BITS, next_incarnation=8), "counter 0 is never minted"
    assert not ids.minted(CLIENT_ID_BASE | 12_345, next_incarnation=8), "incarnations start at 1"
    for invented in (0, 1, 4711, (1 << 62) - 1, 1 << 63, (1 << 63) - 1 - CLIENT_ID_BASE):
        assert not ids.minted(invented, next_incarnation=8), invented


def test_a_process_mints_ids_of_its_incarnation_only_up_to_its_counter() -> None:
    ids = ProducerIds()
    ids.incarnation = 3
    ids._counter = COUNTER_MASK - 1
    last = ids.mint()
    assert last >> COUNTER_BITS & MAX_INCARNATION == 3 and last & COUNTER_MASK == COUNTER_MASK
    with pytest.raises(ProducerIdsExhausted):
        ids.mint()


def answer(topic: str, client_partition: int, code: ErrorCode) -> Any:
    """A produce request's answer to the gateway's client, as ``produce._answer`` makes it (done)."""
    future: Future[Any] = Future()
    future.set_result({"responses": [{"name": topic, "partition_responses": [
        {"index": client_partition, "error_code": code}]}]})  # fmt: skip
    return future


def values_by_target(sources: list[tuple[bytes, SlotTargets]]) -> dict[int, list[bytes]]:
    grouped = batches.regroup(sources, 1 << 20)
    out: dict[int, list[bytes]] = {}
    for partition, raw in grouped.items():
        (length,) = struct.unpack_from(">i", raw, 8)
        out[partition] = [r.value for r in DefaultRecordBatch(raw[: 12 + length])]
    return out


def test_a_batch_written_in_part_is_sent_again_without_what_was_written_even_under_a_new_key_map() -> None:
    """Records of one client batch regrouped to partitions 0 and 1; 0 took its part, 1 refused it, so the
    client was answered an error. Its resend writes only what 1 did not take, wherever the key map puts it
    now; a resend of a batch that was refused whole writes it all."""
    keys = [f"k{i}".encode() for i in range(40)]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=7,
                                        producer_epoch=0, base_sequence=0, batch_size=1 << 20)  # fmt: skip
    for i, key in enumerate(keys):
        builder.append(i, timestamp=1000, key=key, value=key, headers=[])
    builder.append(len(keys), timestamp=1000, key=None, value=b"keyless", headers=[])
    records = bytes(builder.build())
    two = SlotTargets(array("i", [s % 2 for s in range(KEY_SLOTS)]).tobytes(), bytes(KEY_SLOTS), 0, b"")
    first = values_by_target([(records, two)])
    sequence = StrictSequence()
    sent = StrictBatch(sequence, 0, len(keys), ("T", 3), placed=two, written={0})  # the request wrote 0's part
    sent._answered(answer("T", 3, ErrorCode.not_leader_or_follower))
    assert sequence.verdict(0, len(keys)) is None, "the client sends it again: it goes"
    three = SlotTargets(array("i", [s % 3 for s in range(KEY_SLOTS)]).tobytes(), bytes(KEY_SLOTS), 2, b"")
    again = values_by_target([(records, sequence.placement(0, len(keys), three))])
    assert set(again.pop(DROP)) == set(first[0]), "what partition 0 took is left out"
    assert sorted(v for vs in again.values() for v in vs) == sorted(first[1]), "the rest, once"
    assert all((zlib.crc32(v) & SLOT_MASK) % 3 == p for p, vs in again.items() for v in vs), "by the new map"
    assert sequence.placement(1, len(keys), three) is three, "another batch is placed as the map says"
    sequence.written(0, len(keys))
    assert sequence.placement(0, len(keys), three) is three, "once written, nothing is left to leave out"
    whole = StrictSequence()
    StrictBatch(whole, 0, len(keys), ("T", 3), placed=two)._answered(answer("T", 3, ErrorCode.not_leader_or_follower))
    assert whole.placement(0, len(keys), three) is three, "refused whole: sent whole again"


def test_a_batch_after_one_this_instance_refused_unwritten_is_refused_until_that_one_comes_again() -> None:
    """A broker takes no batch after one it did not take; a gateway that did (a new physical producer at the
    gap) would have librdkafka count the refused batch written: acknowledged, without an offset, lost."""
    ids, key = ProducerIds(), (7, 0, "T", 3)
    assert not ids.out_of_order(key, 10), "nothing refused: anything goes (a move from another instance too)"
    ids.refused(key, 10)
    ids.refused(key, 15)
    assert ids.out_of_order(key, 15) and ids.out_of_order(key, 11), "the batches after the first refused one"
    assert not ids.out_of_order(key, 5), "an older resend goes (the physical producer says how)"
    assert not ids.out_of_order((7, 1, "T", 3), 15), "a new epoch starts afresh"
    assert not ids.out_of_order(key, 10), "the refused one again"
    assert not ids.out_of_order(key, 15), "and after it, in order"
    ids.sent(key, 19)
    ids.refused(key, 15)
    assert not ids.out_of_order(key, 20), "a resend of a batch sent before may be written: its broker judges"
    ids.refused(key, 20)
    assert ids.out_of_order(key, 25), "one never sent is refused unwritten"
