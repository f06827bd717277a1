"""How the transactional SDK raises the coordinator's refusals: as confluent-kafka's ``KafkaError`` with the
flags transactional code branches on (fatal: a new producer; abortable: abort and start over; retriable)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from metadata_log.errors import Conflict, InvalidRequest, NotFound, OutcomeUnknown, Unavailable
from sdk.transactions import _from_kfed


def _flags(e: Exception) -> tuple[int, bool, bool, bool]:
    error = _from_kfed(e, "commit_transaction").args[0]  # type: ignore[arg-type]
    return error.code(), error.fatal(), error.txn_requires_abort(), error.retriable()


def test_a_fenced_producer_is_fatal_as_in_confluent_kafka() -> None:
    assert _flags(Conflict("fenced", field="epoch", kafka_error="PRODUCER_FENCED")) == (
        KafkaError._FENCED, True, False, False)  # fmt: skip


def test_a_decided_or_refused_transaction_asks_for_an_abort() -> None:
    assert _flags(Conflict("decided", kafka_error="INVALID_TXN_STATE"))[2]
    assert _flags(Conflict("tansu", kafka_error="_UNSUPPORTED_FEATURE"))[:3] == (
        KafkaError._UNSUPPORTED_FEATURE, False, True)  # fmt: skip


def test_what_may_pass_is_retriable_and_bad_input_is_neither() -> None:
    assert _flags(Unavailable("no leader"))[3]
    assert _flags(OutcomeUnknown("timed out"))[3]
    assert _flags(Conflict("wait", kafka_error="CONCURRENT_TRANSACTIONS"))[3]
    assert _flags(InvalidRequest("timeout_ms", "too long")) == (KafkaError._INVALID_ARG, False, False, False)
    assert _flags(NotFound("unknown", kafka_error="INVALID_PRODUCER_ID_MAPPING"))[0] == KafkaError._STATE
