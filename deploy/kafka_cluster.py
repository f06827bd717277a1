"""Apache Kafka sub-clusters on this machine: 1..N brokers in KRaft mode, each a combined broker + controller.

The jars come from Maven Central through ``deploy/kafka/pom.xml`` into a cache outside git (``deploy.maven``:
``make kafka``, which ``make run`` and ``make test`` run).

``KafkaCluster`` is the launcher the local federation, tests, benchmarks and the gateway's tests share::

    with KafkaCluster(tmp_path / "k", brokers=3) as kafka:   # formatted and started; stopped on leaving
        kafka.bootstrap                                       # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        kafka.kill(1)                                         # kill -9 the broker with index 1
        kafka.start(1)                                        # restarted on its data: nothing lost

A cluster of 3 or more brokers replicates every topic 3 times with ``min.insync.replicas=2`` (broker
defaults, so they also hold for the topics kfed's agent creates); smaller ones keep 1 copy per broker
count. Every broker is a voter of the cluster's KRaft quorum, so a cluster of 3 survives one lost node.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Final

from .maven import KAFKA_BROKER, JarsNotInstalled
from .processes import Processes, ProcessExited, free_ports, kill_process, spawn, stop_processes

HEAP_MB: Final = 512
"""Most heap of one broker JVM (``-Xmx``). The broker keeps data in the page cache, not the heap."""
STARTUP_TIMEOUT_S: Final = 120.0
"""Longest wait for a broker to say it has started (2 shared cores: JVMs start slowly under load)."""
STOP_GRACE_S: Final = 10.0
"""A broker asked to stop (SIGTERM) shuts down in order: it flushes and closes its logs, so that its next
start skips log recovery. Past this it is killed (which loses nothing acknowledged, see the module doc)."""
READY_LINE: Final = b"Kafka Server started"
"""Logged once the broker is unfenced and serving (KafkaRaftServer.startup)."""

# Bounded, modest JVMs: many brokers share 2 cores and the memory with everything else on the machine.
JVM_OPTIONS: Final = (
    "-Xms64m",
    "-XX:MaxMetaspaceSize=160m",
    "-XX:ReservedCodeCacheSize=96m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:ParallelGCThreads=2",
    "-XX:ConcGCThreads=1",
    "-XX:CICompilerCount=2",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# The storage format tool runs once per broker and briefly: start it as fast as possible.
TOOL_JVM_OPTIONS: Final = ("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")

LOG4J2_CONFIG: Final = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def kafka_version() -> str:
    """The pinned version: ``<kafka.version>`` of ``deploy/kafka/pom.xml`` (its one place)."""
    return KAFKA_BROKER.version()


def installed_libs() -> Path:
    """The directory of the broker's jars; ``JarsNotInstalled`` (saying how to install them) when missing."""
    try:
        return KAFKA_BROKER.installed()
    except JarsNotInstalled as e:
        raise JarsNotInstalled(f"{e}; or use Tansu sub-clusters (--broker tansu)") from None


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting with "-" (the
    storage tool would read it as an option; Kafka's ``Uuid.randomUuid`` makes the same rule)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaCluster(Processes):
    """One Apache Kafka cluster of ``brokers`` nodes on loopback, its data under ``data_dir``.

    ``ports``: (broker port, controller port) per node; free ones when not given. Node ``i`` (0-based index)
    has ``node.id`` i + 1, its log dirs in ``data_dir/broker-<i+1>`` and its output in ``data_dir/broker-<i+1>.log``.
    Storage is formatted on the first start only: a restart on the same ``data_dir`` keeps every topic,
    record and committed offset. ``kill()`` then ``start()`` restarts; ``stop()`` is final: a stopped launcher
    starts nothing more (a ``start()`` running in another thread fails instead of leaving processes behind).
    """

    def __init__(
        self,
        data_dir: Path,
        brokers: int = 1,
        ports: Sequence[tuple[int, int]] | None = None,
        heap_mb: int = HEAP_MB,
        libs: Path | None = None,
        extra_config: dict[str, str] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be at least 1, got {brokers}")
        if ports is None:
            free = free_ports(2 * brokers)
            ports = list(zip(free[:brokers], free[brokers:], strict=True))
        if len(ports) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} port pairs, got {len(ports)}")
        self.data_dir = data_dir
        self.size = brokers
        self.ports = list(ports)
        self.heap_mb = heap_mb
        self.libs = libs
        self.extra_config = dict(extra_config or {})
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()  # spawning vs stop(): every process started is one stop() sees
        self._starting = threading.Lock()  # one start() at a time: never two processes on one node's data
        self._stopped = False

    # -- what clients need --------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{broker}" for broker, _ in self.ports)

    @property
    def replication_factor(self) -> int:
        """Copies of each topic: 3 from 3 brokers on, else one per broker."""
        return min(3, self.size)

    @property
    def min_insync_replicas(self) -> int:
        """Copies an acks=all write waits for: 2 of 3, so one broker may be down without stopping writes."""
        return 2 if self.replication_factor >= 3 else 1

    # -- processes ----------------------------------------------------------------------------------
    def start(self, index: int | None = None, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start every broker (or the one at ``index``), formatting storage first where it is new, and wait
        until each says it serves. A lone restarted node needs the others' quorum to get there."""
        with self._starting:
            self._start(range(self.size) if index is None else [index], timeout_s)

    def _start(self, indexes: Sequence[int], timeout_s: float) -> None:
        libs = self.libs or installed_libs()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        formatted = len(list(self.data_dir.glob("broker-*/meta.properties")))
        if formatted > self.size:
            raise ValueError(
                f"{self.data_dir} holds a cluster of {formatted} brokers, not {self.size}: start it with its own "
                "broker count, or give a new data dir"
            )
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_CONFIG)
        self._format([i for i in indexes if not (self._log_dir(i) / "meta.properties").exists()], libs)
        offsets = {}
        for i in indexes:
            if self.running(i):
                continue
            self._config_path(i).write_text(self._config(i))
            offsets[i] = self._log_path(i).stat().st_size if self._log_path(i).exists() else 0
            self._spawn(i, self._java(libs, "kafka.Kafka", str(self._config_path(i))))
        for i, offset in offsets.items():
            self._wait_started(i, offset, timeout_s)

    def kill(self, index: int | None = None, sig: int = signal.SIGKILL) -> None:
        """kill -9 (or ``sig``) every broker, or the one at ``index``; their data stays."""
        for i in range(self.size) if index is None else [index]:
            kill_process(self.procs.get(i), sig)

    def stop(self) -> None:
        """Orderly shutdown of every broker (SIGTERM), killed after ``STOP_GRACE_S``. Final (see the class)."""
        with self._lock:
            self._stopped = True
        stop_processes(list(self.procs.values()), STOP_GRACE_S)

    def _spawn(self, index: int, args: list[str]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"the Kafka cluster in {self.data_dir} was stopped while it started")
            proc = self.procs[index] = spawn(args, self._log_path(index))
            return proc

    def wipe(self) -> None:
        """Delete every broker's data (all must be stopped): the next start formats a new, empty cluster."""
        if any(self.running(i) for i in range(self.size)):
            raise RuntimeError("wipe() needs every broker stopped")
        for i in range(self.size):
            shutil.rmtree(self._log_dir(i), ignore_errors=True)
        (self.data_dir / "cluster.id").unlink(missing_ok=True)

    def running(self, index: int) -> bool:
        proc = self.procs.get(index)
        return proc is not None and proc.poll() is None

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return list(self.procs.values())

    def pid(self, index: int) -> int | None:
        proc = self.procs.get(index)
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- files --------------------------------------------------------------------------------------
    def _log_dir(self, index: int) -> Path:
        return self.data_dir / f"broker-{index + 1}"

    def _log_path(self, index: int) -> Path:
        return self.data_dir / f"broker-{index + 1}.log"

    def _config_path(self, index: int) -> Path:
        return self.data_dir / f"broker-{index + 1}.properties"

    def _cluster_id(self) -> str:
        """The cluster's id, chosen once and kept in ``data_dir/cluster.id`` (every node is formatted with it)."""
        path = self.data_dir / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id())
        return path.read_text().strip()

    def _config(self, index: int) -> str:
        broker_port, controller_port = self.ports[index]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(self.ports))
        rf, min_isr = self.replication_factor, self.min_insync_replicas
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(index + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._log_dir(index)),
            # kfed's agent creates every physical topic with its count: a producer must never auto-create one
            "auto.create.topics.enable": "false",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            # internal topics of 50 partitions each cost seconds at startup and memory ever after: a handful
            # is plenty for a sub-cluster on one machine
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            # threads: the defaults size a broker for a server of its own
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "2",
            "log.cleaner.threads": "1",
            "num.replica.fetchers": "1",
            **self.extra_config,
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def _java(self, libs: Path, main: str, *args: str, tool: bool = False) -> list[str]:
        options = TOOL_JVM_OPTIONS if tool else (f"-Xmx{self.heap_mb}m", *JVM_OPTIONS)
        log4j = f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}"
        return [_java_binary(), *options, log4j, "-cp", f"{libs}/*", main, *args]

    def _format(self, indexes: Sequence[int], libs: Path) -> None:
        """Format the storage of new nodes, all at once (one short JVM each)."""
        if not indexes:
            return
        cluster_id = self._cluster_id()
        running = []
        for i in indexes:
            self._config_path(i).write_text(self._config(i))
            args = self._java(
                libs,
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                "-t",
                cluster_id,
                "-c",
                str(self._config_path(i)),
                tool=True,
            )
            running.append((i, self._spawn(i, args)))
        for i, proc in running:
            if proc.wait(STARTUP_TIMEOUT_S) != 0:
                raise ProcessExited(
                    f"formatting broker {i + 1}'s storage failed (status {proc.returncode})", self._log_path(i)
                )

    def _wait_started(self, index: int, offset: int, timeout_s: float) -> None:
        """Until the broker's log (past ``offset``) says it started; fails early when the process ends."""
        deadline = time.monotonic() + timeout_s
        log_path, proc = self._log_path(index), self.procs[index]
        while True:
            with open(log_path, "rb") as f:
                f.seek(offset)
                if READY_LINE in f.read():
                    return
            if proc.poll() is not None:
                raise ProcessExited(f"broker {index + 1} exited with status {proc.returncode} while starting", log_path)
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {index + 1} did not start within {timeout_s:.0f} s; log: {log_path}")
            time.sleep(0.05)


@cache
def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    found = str(candidate) if candidate and candidate.exists() else shutil.which("java")
    if found is None:
        raise JarsNotInstalled(
            "java is not installed (Apache Kafka needs Java 17 or newer): apt-get install openjdk-17-jre-headless"
        )
    return found
