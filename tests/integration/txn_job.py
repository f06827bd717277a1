"""A consume-transform-produce job, exactly once: ``python -m tests.integration.txn_job CONTROLLERS IN OUT [BATCH]``.

Reads ``IN`` as group ``ctp`` (read_committed), writes ``out-<value>`` to ``OUT`` and commits the input
offsets in the same transaction (transactional.id ``ctp``), ``BATCH`` messages at most per transaction,
until killed.
``tests/integration/test_transactions.py`` kills it (-9) and starts it again, over and over."""

from __future__ import annotations

import sys

from confluent_kafka import TopicPartition

from sdk import FederatedConsumer, FederatedProducer


def main(controllers: str, source: str, sink: str, batch: str = "200") -> None:
    consumer = FederatedConsumer({"kfed.controllers": controllers, "group.id": "ctp", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                  "kfed.session.timeout.ms": 4000})  # fmt: skip
    producer = FederatedProducer({"kfed.controllers": controllers, "transactional.id": "ctp", "linger.ms": 5})
    producer.init_transactions(120)
    consumer.subscribe([source])
    print("ready", flush=True)
    while True:
        messages = consumer.consume(int(batch), 0.5)
        if not messages:
            continue
        producer.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        for m in messages:
            producer.produce(sink, value=b"out-" + m.value())
            positions[(m.topic(), m.partition())] = m.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)


if __name__ == "__main__":
    main(*sys.argv[1:5])
