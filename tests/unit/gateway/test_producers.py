"""The gateway's producer bookkeeping (``gateway/producers.py``): which batches a physical producer id takes, and
the sequence the gateway keeps for a strict topic's regrouped batches."""

from __future__ import annotations

from gateway.producers import PhysicalProducer, StrictSequence
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
