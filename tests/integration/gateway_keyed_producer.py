"""The key-order tests' producer process through the gateway: ``python -m tests.integration.gateway_keyed_producer
BOOTSTRAP TOPIC FIRST_KEY LAST_KEY STOP_FILE REPORT_FILE``.

``keyed_producer``'s rounds and report, written by kafka-python with its defaults (idempotent, five requests
in flight), an unmodified Kafka client that knows nothing of kfed: the gateway places its keys and keeps its
sequences.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from kafka import KafkaProducer


def main(bootstrap: str, topic: str, first: int, last: int, stop_file: Path, report_file: Path) -> int:
    keys = [f"k{i}" for i in range(first, last)]
    sent = dict.fromkeys(keys, 0)
    failed: list[str] = []
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5)
    futures = []
    while not stop_file.exists():
        for key in keys:
            futures.append(producer.send(topic, key=key.encode(), value=f"{key}:{sent[key]}".encode()))
            sent[key] += 1
        time.sleep(0.05)
    producer.flush(120)
    for f in futures:
        try:
            f.get(timeout=0)
        except Exception as e:  # reported: a failed send is a gap the test must not see
            failed.append(repr(e))
    producer.close()
    report_file.write_text(json.dumps({"sent": sent, "failed": failed[:20], "remaining": 0}))
    return 0


if __name__ == "__main__":
    bootstrap, topic, first, last, stop_file, report_file = sys.argv[1:7]
    sys.exit(main(bootstrap, topic, int(first), int(last), Path(stop_file), Path(report_file)))
