"""A producer process for the key-order tests: ``python -m tests.integration.keyed_producer CLIENT TARGET TOPIC
FIRST_KEY LAST_KEY STOP_FILE REPORT_FILE``.

CLIENT ``sdk``: a FederatedProducer, TARGET the controllers. CLIENT ``gateway``: kafka-python with its defaults
(idempotent, five requests in flight), an unmodified Kafka client that knows nothing of kfed, writing through
the gateway at TARGET (HOST:PORT), which places its keys and keeps its sequences.

Produces, round after round until ``STOP_FILE`` exists, one message per key ``k<FIRST_KEY>`` ..
``k<LAST_KEY - 1>`` valued ``<key>:<sequence number>`` (a sequence per key, from 0), then flushes and writes
to ``REPORT_FILE`` (JSON) how many messages of each key were acknowledged, and which failed. A message that
failed would be a gap the consumers cannot tell from a loss: the test asserts there is none.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from sdk import FederatedProducer


class _Sdk:
    def __init__(self, controllers: str, failed: list[str]) -> None:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(f"{msg.value()!r}: {err}")

        self.producer = FederatedProducer({"kfed.controllers": controllers, "linger.ms": 5, "on_delivery": report,
                                           "message.timeout.ms": 120_000})  # fmt: skip

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.producer.produce(topic, value, key=key)
        self.producer.poll(0)

    def finish(self) -> int:
        remaining = self.producer.flush(120)
        self.producer.close()
        return remaining


class _KafkaPython:
    def __init__(self, bootstrap: str, failed: list[str]) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5)
        self.futures: list[Any] = []
        self.failed = failed

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.futures.append(self.producer.send(topic, key=key, value=value))

    def finish(self) -> int:
        self.producer.flush(120)
        for f in self.futures:
            try:
                f.get(timeout=0)
            except Exception as e:  # reported: a failed send is a gap the test must not see
                self.failed.append(repr(e))
        self.producer.close()
        return 0


def main(client: str, target: str, topic: str, first: int, last: int, stop_file: Path, report_file: Path) -> int:
    keys = [f"k{i}" for i in range(first, last)]
    sent = dict.fromkeys(keys, 0)
    failed: list[str] = []
    producer = (_Sdk if client == "sdk" else _KafkaPython)(target, failed)
    while not stop_file.exists():
        for key in keys:
            producer.send(topic, key.encode(), f"{key}:{sent[key]}".encode())
            sent[key] += 1
        time.sleep(0.05)
    remaining = producer.finish()
    report_file.write_text(json.dumps({"sent": sent, "failed": failed[:20], "remaining": remaining}))
    return 0


if __name__ == "__main__":
    # kafka-python's warnings (a produce answered with an error and retried, a reset producer id) go to the
    # producer's log in the test's directory: what a failure there needs explained
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client, target, topic, first, last, stop_file, report_file = sys.argv[1:8]
    sys.exit(main(client, target, topic, int(first), int(last), Path(stop_file), Path(report_file)))
