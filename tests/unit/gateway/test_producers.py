"""The gateway's producer bookkeeping (``gateway/producers.py``): which client producer ids it takes, which
batches a physical producer id takes, and the sequence the gateway keeps for a strict topic's regrouped
batches."""

from __future__ import annotations

import pytest

from gateway.producers import (
    CLIENT_ID_BASE,
    COUNTER_BITS,
    COUNTER_MASK,
    MAX_INCARNATION,
    PhysicalProducer,
    ProducerIds,
    ProducerIdsExhausted,
    StrictSequence,
)
from kafka_wire.protocol import ErrorCode


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
