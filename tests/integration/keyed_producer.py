"""A producer process for the key-order tests: ``python -m tests.integration.keyed_producer CONTROLLERS TOPIC
FIRST_KEY LAST_KEY STOP_FILE REPORT_FILE``.

Produces, round after round until ``STOP_FILE`` exists, one message per key ``k<FIRST_KEY>`` ..
``k<LAST_KEY - 1>`` valued ``<key>:<sequence number>`` (a sequence per key, from 0), then flushes and writes
to ``REPORT_FILE`` (JSON) how many messages of each key were acknowledged, and which failed. A message that
failed would be a gap the consumers cannot tell from a loss: the test asserts there is none.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from sdk import FederatedProducer


def main(controllers: str, topic: str, first: int, last: int, stop_file: Path, report_file: Path) -> int:
    keys = [f"k{i}" for i in range(first, last)]
    sent = dict.fromkeys(keys, 0)
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.value()!r}: {err}")

    producer = FederatedProducer({"kfed.controllers": controllers, "linger.ms": 5, "on_delivery": report,
                                  "message.timeout.ms": 120_000})  # fmt: skip
    while not stop_file.exists():
        for key in keys:
            producer.produce(topic, f"{key}:{sent[key]}".encode(), key=key.encode())
            sent[key] += 1
        producer.poll(0)
        time.sleep(0.05)
    remaining = producer.flush(120)
    producer.close()
    report_file.write_text(json.dumps({"sent": sent, "failed": failed[:20], "remaining": remaining}))
    return 0


if __name__ == "__main__":
    controllers, topic, first, last, stop_file, report_file = sys.argv[1:7]
    sys.exit(main(controllers, topic, int(first), int(last), Path(stop_file), Path(report_file)))
