"""The coordinator's workaround for kio 0.6.5 and DescribeTransactions (``controller/txn_kafka.py``): a start
time of -1 (no transaction started) is read as 0, and nothing else of the frame changes."""

from __future__ import annotations

from controller.txn_kafka import DESCRIBE_TRANSACTIONS, _known_start_times
from kafka_wire import protocol as kp


def _frame(start_ms: int, transactional_id: str = "tx@c1", state: str = "Empty") -> bytes:
    data = {"transaction_states": [{"transactional_id": transactional_id, "transaction_state": state,
                                    "transaction_timeout_ms": 900_000, "transaction_start_time": start_ms,
                                    "producer_id": 7, "producer_epoch": 3, "topics": []}]}  # fmt: skip
    return bytes(kp.encode_response(DESCRIBE_TRANSACTIONS, 0, 11, data))[4:]


def test_a_start_time_of_minus_one_decodes_as_zero_and_the_rest_as_sent() -> None:
    frame = _frame(-1, "x" * 300)  # a two-byte varint length
    try:
        kp.decode_response(DESCRIBE_TRANSACTIONS, 0, frame)
        raise AssertionError("kio decodes -1 now: the workaround can go")
    except kp.ProtocolError:
        pass
    correlation_id, body = kp.decode_response(DESCRIBE_TRANSACTIONS, 0, _known_start_times(frame))
    state = body.transaction_states[0]
    assert correlation_id == 11
    assert (state.transactional_id, state.transaction_state, state.producer_id, state.producer_epoch) == (
        "x" * 300, "Empty", 7, 3)  # fmt: skip
    assert state.transaction_start_time.timestamp() == 0


def test_a_real_start_time_is_left_alone() -> None:
    frame = _frame(1_700_000_000_000, state="Ongoing")
    assert _known_start_times(frame) == frame
