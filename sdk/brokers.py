"""Which broker a cluster runs, probed with librdkafka (the facts per broker: ``metadata_client.brokers``).

A broker is told apart by the first of Tansu's gaps, which librdkafka learns from the broker's ApiVersions:
asked to validate a CreatePartitions, it refuses before sending anything when the broker lacks the API
(``_UNSUPPORTED_FEATURE``), and Apache Kafka answers for the topic (which does not exist: nothing changes).
"""

from __future__ import annotations

import threading
import time
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from metadata_client.brokers import APACHE_KAFKA, TANSU, BrokerKind
from metadata_log.errors import Unavailable

PROBE_TOPIC: Final = "__kfed_broker_probe"
"""A topic name the probe asks about; a validate-only request never creates it."""


class BrokerUnknown(Unavailable):
    """The broker did not answer the probe in time (down, or not a Kafka broker)."""


def probe(admin: AdminClient, timeout_s: float) -> BrokerKind:
    """Which broker ``admin`` talks to: one validate-only CreatePartitions (nothing changes on the broker)."""
    futures = admin.create_partitions([NewPartitions(PROBE_TOPIC, 2)], validate_only=True, request_timeout=timeout_s)
    try:
        for future in futures.values():
            future.result()
    except KafkaException as e:
        error = e.args[0] if e.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        if code == KafkaError._UNSUPPORTED_FEATURE:
            return TANSU
        if code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, None):
            raise BrokerUnknown(error.str() if isinstance(error, KafkaError) else str(e)) from None
    return APACHE_KAFKA  # it took the request: UNKNOWN_TOPIC_OR_PART, or any other answer of the broker's own


_KNOWN: dict[str, BrokerKind] = {}
_UNKNOWN: dict[str, tuple[float, BrokerUnknown]] = {}  # bootstrap -> (when its probe failed, the failure)
_KNOWN_LOCK = threading.Lock()
UNKNOWN_FOR_S: Final = 5.0
"""How long a failed probe is the answer for its cluster: a caller on a loop (a consumer starting partitions)
does not wait out a timeout per call on a cluster that is down."""


def broker_at(bootstrap: str, timeout_s: float = 5.0) -> BrokerKind:
    """The broker of the cluster at ``bootstrap``, probed once per process (a cluster keeps its kind).
    ``BrokerUnknown`` when it does not answer, and at once for ``UNKNOWN_FOR_S`` after that."""
    with _KNOWN_LOCK:
        known = _KNOWN.get(bootstrap)
        failed = _UNKNOWN.get(bootstrap)
    if known is not None:
        return known
    if failed is not None and time.monotonic() - failed[0] < UNKNOWN_FOR_S:
        raise failed[1]
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 3, "socket.timeout.ms": max(1000, int(timeout_s * 1000))}
    )
    try:
        broker = probe(admin, timeout_s)
    except BrokerUnknown as e:
        with _KNOWN_LOCK:
            _UNKNOWN[bootstrap] = (time.monotonic(), e)
        raise
    with _KNOWN_LOCK:
        _KNOWN[bootstrap] = broker
        _UNKNOWN.pop(bootstrap, None)
    return broker
