"""Unmodified Kafka clients driven by the gateway tests, each as a producer and as a group member.

Every client produces values ``RUN-i`` (odd ones keyed ``key-(i % 23)``) and reports which were acknowledged;
a member records the values of ``RUN`` it received and the partitions it was assigned. Members stop the way
an application does (commit and leave).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

TOPIC = "U_TopicA"
JAVA_DIR = Path(__file__).parent / "java"


def key_of(i: int) -> str | None:
    return f"key-{i % 23}" if i % 2 else None


class Member(Protocol):
    name: str
    values: list[str]

    def start(self) -> None: ...
    def assigned(self) -> bool: ...
    def stop(self) -> None: ...


Producer = Callable[[str, str, int], set[str]]
"""(bootstrap, run, n) -> the values acknowledged; sends over about two seconds, not in one burst."""
MemberFactory = Callable[[str, str, str, str], Member]
"""(name, bootstrap, group, run) -> a member, not started."""


class _ThreadMember:
    """A member polling in a thread of the test process (confluent-kafka, kafka-python)."""

    def __init__(self, name: str, run: str) -> None:
        self.name = name
        self.run = run
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def assigned(self) -> bool:
        return bool(self.partitions)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(60)
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            self.loop(self._stop)
        except BaseException as e:  # reported by stop()
            self.error = e

    def loop(self, stop: threading.Event) -> None:
        raise NotImplementedError


# -- confluent-kafka, without kfed's SDK -------------------------------------------------------------
def confluent_produce(bootstrap: str, run: str, n: int) -> set[str]:
    from confluent_kafka import Producer as KafkaProducer

    acked: set[str] = set()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value().decode())

    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.metrics.push": False,
                       "log_level": 3, "on_delivery": delivered})  # fmt: skip
    for i in range(n):
        key = key_of(i)
        p.produce(TOPIC, value=f"{run}-{i}".encode(), key=key.encode() if key else None)
        if i % 100 == 0:
            p.poll(0)
            time.sleep(0.05)
    p.flush(120)
    return acked


class ConfluentMember(_ThreadMember):
    def __init__(self, name: str, bootstrap: str, group: str, run: str) -> None:
        super().__init__(name, run)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                       "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.metrics.push": False,
                       "log_level": 3}  # fmt: skip

    def loop(self, stop: threading.Event) -> None:
        from confluent_kafka import Consumer

        c = Consumer(self.config)
        c.subscribe([TOPIC], on_assign=lambda _c, ps: self.partitions.update(p.partition for p in ps))
        while not stop.is_set():
            for m in c.consume(500, 0.2):
                if not m.error() and m.value().startswith(self.run.encode()):
                    self.values.append(m.value().decode())
        c.close()


# -- kafka-python --------------------------------------------------------------------------------------
def kafka_python_produce(bootstrap: str, run: str, n: int) -> set[str]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5, retries=1_000_000,
                      delivery_timeout_ms=120_000)  # fmt: skip
    futures = []
    for i in range(n):
        key = key_of(i)
        value = f"{run}-{i}"
        futures.append((value, p.send(TOPIC, key=key.encode() if key else None, value=value.encode())))
        if i % 100 == 0:
            time.sleep(0.05)
    p.flush(120)
    p.close()
    return {value for value, f in futures if f.succeeded()}


class KafkaPythonMember(_ThreadMember):
    def __init__(self, name: str, bootstrap: str, group: str, run: str) -> None:
        super().__init__(name, run)
        self.bootstrap, self.group = bootstrap, group

    def loop(self, stop: threading.Event) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.partitions.update(tp.partition for tp in assigned)

        c = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), group_id=self.group,
                          auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)  # fmt: skip
        c.subscribe([TOPIC], listener=Listener())
        while not stop.is_set():
            for records in c.poll(timeout_ms=200).values():
                self.values += [r.value.decode() for r in records if r.value.startswith(self.run.encode())]
        c.close()


# -- kcat (librdkafka) ---------------------------------------------------------------------------------
def kcat_produce(bootstrap: str, run: str, n: int) -> set[str]:
    """Lines fed over time. kcat reports a failed delivery on stderr, one line each, without the message: any
    fails the test."""
    proc = subprocess.Popen(["kcat", "-b", bootstrap, "-P", "-t", TOPIC, "-K", "\t", "-X", "log_level=3"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdin is not None
    for i in range(n):
        proc.stdin.write(f"{key_of(i) or ''}\t{run}-{i}\n")
        if i % 100 == 0:
            proc.stdin.flush()
            time.sleep(0.05)
    proc.stdin.close()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait(180)
    assert proc.returncode == 0, f"kcat -P exited {proc.returncode}: {err[-2000:]}"
    return {f"{run}-{i}" for i in range(n)}


class _ProcessMember:
    """A member in a child process whose stdout says what it got."""

    def __init__(self, name: str, run: str, args: list[str]) -> None:
        self.name = name
        self.run = run
        self.args = args
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.revoked: set[int] = set()
        self.proc: subprocess.Popen[str] | None = None
        self._readers: list[threading.Thread] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        for stream, parse in ((self.proc.stdout, self.parse), (self.proc.stderr, self.parse_stderr)):
            reader = threading.Thread(target=self._read, args=(stream, parse), daemon=True)
            reader.start()
            self._readers.append(reader)

    @staticmethod
    def _read(stream: Any, parse: Callable[[str], None]) -> None:
        for line in stream:
            parse(line.rstrip("\n"))

    def parse(self, line: str) -> None:
        raise NotImplementedError

    def parse_stderr(self, line: str) -> None:
        pass

    def assigned(self) -> bool:
        return bool(self.partitions)

    def stop(self) -> None:
        raise NotImplementedError

    def _wait(self) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"{self.name} did not stop within 60 s") from None
        for reader in self._readers:
            reader.join(10)


class KcatMember(_ProcessMember):
    def __init__(self, name: str, bootstrap: str, group: str, run: str) -> None:
        super().__init__(name, run, ["kcat", "-b", bootstrap, "-G", group, "-u", "-f", "%p %s\n", "-X",
                                     "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000", "-X",
                                     "heartbeat.interval.ms=500", "-X", "log_level=3", TOPIC])  # fmt: skip

    def parse(self, line: str) -> None:
        _, _, value = line.partition(" ")
        if value.startswith(self.run):
            self.values.append(value)

    def parse_stderr(self, line: str) -> None:
        # "% Group G rebalanced (memberid M): assigned: U_TopicA [0], U_TopicA [1]"
        if "rebalanced" in line and "assigned:" in line:
            self.partitions.update(int(p) for p in re.findall(r"\[(\d+)\]", line.split("assigned:", 1)[1]))

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)  # kcat commits and leaves the group on SIGTERM
        self._wait()


# -- the Java client (org.apache.kafka:kafka-clients) ---------------------------------------------------
def java_classpath() -> str:
    """Build tests/gateway/java into a cache outside git (once per change of its files); skip without Java."""
    if shutil.which("java") is None or shutil.which("javac") is None or shutil.which("mvn") is None:
        pytest.skip("Java 17 and Maven are needed for the Java client tests")
    sources = [JAVA_DIR / "pom.xml", JAVA_DIR / "GatewayClient.java"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kfed" / f"gateway-java-{digest}"
    classes, lib = cache / "classes", cache / "lib"
    if not (classes / "GatewayClient.class").exists():
        subprocess.run(["mvn", "-q", "-f", str(JAVA_DIR / "pom.xml"), "dependency:copy-dependencies",
                        f"-DoutputDirectory={lib}"], check=True, timeout=600)  # fmt: skip
        subprocess.run(["javac", "-cp", f"{lib}/*", "-d", str(classes), str(JAVA_DIR / "GatewayClient.java")],
                       check=True, timeout=300)  # fmt: skip
    return f"{classes}:{lib}/*"


def java_produce(classpath: str) -> Producer:
    def produce(bootstrap: str, run: str, n: int) -> set[str]:
        done = subprocess.run(["java", "-cp", classpath, "GatewayClient", "produce", bootstrap, TOPIC, run, str(n)],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0 and done.stdout.rstrip().endswith("done"), done.stderr[-2000:]
        return {line.split()[1] for line in done.stdout.splitlines() if line.startswith("acked ")}

    return produce


class JavaMember(_ProcessMember):
    def __init__(self, classpath: str, name: str, bootstrap: str, group: str, run: str, *properties: str) -> None:
        super().__init__(name, run, ["java", "-cp", classpath, "GatewayClient", "consume", bootstrap, TOPIC, group,
                                     run, *properties])  # fmt: skip

    def parse(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "got":
            self.values.append(rest.split()[0])
        elif kind == "assigned" and rest:
            self.partitions.update(int(p) for p in rest.split(","))
        elif kind == "revoked" and rest:
            self.revoked.update(int(p) for p in rest.split(","))

    def stop(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the client commits, leaves and exits
        self._wait()


def java_member(classpath: str, *properties: str) -> MemberFactory:
    return lambda name, bootstrap, group, run: JavaMember(classpath, name, bootstrap, group, run, *properties)


class JavaStream:
    """The Java producer sending about 2,000 key-less and keyed messages a second until stopped."""

    def __init__(self, classpath: str, bootstrap: str, run: str, *properties: str) -> None:
        self.args = ["java", "-cp", classpath, "GatewayClient", "stream", bootstrap, TOPIC, run, *properties]
        self.acked: dict[str, int] = {}  # value -> logical partition
        self.failed: set[str] = set()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, *rest = line.split()
            if kind == "acked":
                self.acked[rest[0]] = int(rest[1])
            elif kind == "failed":
                self.failed.add(rest[0])

    def stop(self, timeout_s: float = 120) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self._reader is not None
        self.proc.stdin.close()
        self.proc.wait(timeout_s)
        self._reader.join(10)


class KcatStream:
    """kcat -P fed about 1,000 key-less lines a second until stopped. kcat says how many deliveries failed,
    not which (``failed``)."""

    def __init__(self, bootstrap: str, run: str, *properties: str) -> None:
        self.run = run
        args = ["kcat", "-b", bootstrap, "-P", "-t", TOPIC, "-X", "log_level=3"]
        for p in properties:
            args += ["-X", p]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.sent: list[str] = []
        self.failed = 0
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        assert self.proc.stdin is not None
        i = 0
        while not self._stop.is_set():
            for _ in range(50):
                value = f"{self.run}-k{i}"
                self.proc.stdin.write(value + "\n")
                self.sent.append(value)
                i += 1
            self.proc.stdin.flush()
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._feeder.join(10)
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        self.proc.wait(120)
        self.failed = sum("Delivery failed" in line for line in err.splitlines())
