"""``kfed local up`` and ``kfed local cluster add``: the embedded local federation as a command, over the
launchers of ``deploy.launcher``.

``local_up`` checks its settings and every port it needs before it starts anything (a busy port is one
line naming the port and the flag that moves it), starts the quorum, the sub-clusters and their agents
with progress on the terminal, creates the demo topic and runs until Ctrl-C. ``cluster_add`` asks the
running ``local_up`` (through a request file in its data dir) to start one more sub-cluster: the new
processes are its children, so Ctrl-C stops them with the rest.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from metadata_log.records import LATEST_METADATA_VERSION

from .kafka_cluster import installed_libs
from .launcher import (
    BROKER_KINDS,
    DEMO_TOPIC,
    BrokerKind,
    LocalFederation,
    LocalQuorum,
    create_demo_topic,
    kfed_command,
)
from .maven import JarsNotInstalled
from .processes import (
    PORTS_BELOW_EPHEMERAL,
    ProcessExited,
    ephemeral_low,
    port_in_use,
    spawn,
    stop_processes,
    wait_port,
)
from .spark import SparkCluster, SparkClusterError, start_spark_cluster


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def status_line(fed: LocalFederation) -> str:
    q = fed.quorum
    nodes, leader = [], "-"
    for v in q.voters:
        node = q.node(v.id)
        if node is None:
            nodes.append(f"n{v.id}:down")
            continue
        nodes.append(f"n{v.id}:{node['role'][0].upper()}@{node['applied_offset']}")
        if node["role"] == "leader":
            leader = f"n{v.id}/t{node['term']}"
    try:
        clusters = " ".join(
            f"{c['cluster_id']}:{'FENCED' if c['fenced'] else c['state']}" for c in fed.metadata()["clusters"]
        )
    except RuntimeError:
        clusters = "?"
    return f"leader {leader} | {' '.join(nodes)} | {clusters}"


# Sub-cluster k (from 1) of `kfed local up` listens on broker_base_port + (k - 1) * PORT_STRIDE: the README's
# 19092, 29092, 39092. Past 65535 a sub-cluster gets free ports instead.
PORT_STRIDE = 10_000
CONTROLLER_PORT_OFFSET = 100  # a Kafka broker's controller listener: its broker port + 100
MAX_CLUSTERS = 32
MAX_BROKERS_PER_CLUSTER = 5
MAX_SPARK_WORKERS = 4  # each takes a core and 1 GiB: more than this only queues on a development machine
STATE_FILE = "local-up.json"  # in the data dir: the running `kfed local up` (pid and layout), for `cluster add`
BROKER_NAMES = {"kafka": "Apache Kafka", "tansu": "Tansu"}


@dataclass(frozen=True, slots=True)
class LocalLayout:
    """What ``kfed local up`` runs and where: plain values, saved in the data dir for ``kfed local cluster add``."""

    data_dir: Path
    http_base_port: int = 8001
    raft_base_port: int = 9101
    broker: BrokerKind = "kafka"
    clusters: int = 2
    brokers_per_cluster: int = 1
    broker_base_port: int = 19092
    gateway_port: int = 9092
    spark_workers: int = 0
    spark_master_port: int = 7077
    spark_ui_port: int = 8080

    def check(self) -> str | None:
        """What is wrong with these settings, as the one line to print; None when they are fine."""
        if self.broker not in BROKER_KINDS:
            return f"--broker must be one of {', '.join(BROKER_KINDS)}"
        if not 1 <= self.clusters <= MAX_CLUSTERS:
            return f"--clusters must be between 1 and {MAX_CLUSTERS}"
        if not 1 <= self.brokers_per_cluster <= MAX_BROKERS_PER_CLUSTER:
            return f"--brokers-per-cluster must be between 1 and {MAX_BROKERS_PER_CLUSTER}"
        if not 0 <= self.spark_workers <= MAX_SPARK_WORKERS:
            return f"--spark-workers must be between 0 and {MAX_SPARK_WORKERS}"
        if self.broker == "tansu" and self.brokers_per_cluster != 1:
            return "--broker tansu runs one broker per sub-cluster: leave --brokers-per-cluster at 1"
        bases = (
            ("--http-base-port", self.http_base_port, 3),
            ("--raft-base-port", self.raft_base_port, 3),
            ("--broker-base-port", self.broker_base_port, self.brokers_per_cluster),
            ("--gateway-port", self.gateway_port, 1),
        )
        for flag, base, count in bases:
            if not 1024 <= base <= 65535 - CONTROLLER_PORT_OFFSET - count:
                return f"{flag} must be between 1024 and {65535 - CONTROLLER_PORT_OFFSET - count}"
        return None

    def cluster_base_port(self, index: int) -> int:
        """The first broker port of the sub-cluster at ``index`` (from 0); 0 (free ports) past the range."""
        base = self.broker_base_port + index * PORT_STRIDE
        return base if base + CONTROLLER_PORT_OFFSET + self.brokers_per_cluster <= 65535 else 0

    def cluster_ports(self, index: int) -> list[tuple[int, str, str]]:
        """(port, what listens there, the flag that moves it) of one sub-cluster's brokers."""
        base = self.cluster_base_port(index)
        if not base:
            return []
        cid, flag = f"c{index + 1}", "--broker-base-port"
        ports = [(base + i, f"{cid}'s broker {i + 1}", flag) for i in range(self.brokers_per_cluster)]
        if self.broker == "kafka":
            ports += [
                (base + CONTROLLER_PORT_OFFSET + i, f"{cid}'s KRaft controller {i + 1}", flag)
                for i in range(self.brokers_per_cluster)
            ]
        return ports

    def needed_ports(self) -> list[tuple[int, str, str]]:
        """Every fixed port ``kfed local up`` listens on: (port, what, the flag that moves it)."""
        ports = [(self.http_base_port + i, f"controller {i + 1}'s HTTP API", "--http-base-port") for i in range(3)]
        ports += [(self.raft_base_port + i, f"controller {i + 1}'s Raft", "--raft-base-port") for i in range(3)]
        ports.append((self.gateway_port, "the Kafka gateway", "--gateway-port"))
        for k in range(self.clusters):
            ports += self.cluster_ports(k)
        if self.spark_workers:
            ports += [
                (self.spark_master_port, "the Spark master", "--spark-master-port"),
                (self.spark_ui_port, "the Spark master's UI", "--spark-ui-port"),
            ]
        return ports

    def to_json(self) -> dict[str, Any]:
        return {f: str(v) if isinstance(v, Path) else v for f, v in asdict(self).items()}


def free_layout(data_dir: Path, broker: BrokerKind = "kafka", spark_workers: int = 0) -> LocalLayout:
    """A layout for tests and benchmarks whose every fixed port, and those of a third sub-cluster, is free now
    and below the kernel's ephemeral range: a port in that range can be taken by any outgoing connection
    between this check and the bind. Bases sit below ``free_ports``' share where they fit (a third sub-cluster's
    brokers, two strides up, do not); tried at random until a set fits."""
    rng = random.Random()
    low = ephemeral_low() or 32_768
    share = low - PORTS_BELOW_EPHEMERAL
    top = share if share - 1024 > PORT_STRIDE + CONTROLLER_PORT_OFFSET + 2 * MAX_BROKERS_PER_CLUSTER else low
    brokers_top = min(top - PORT_STRIDE, low - 2 * PORT_STRIDE) - CONTROLLER_PORT_OFFSET - MAX_BROKERS_PER_CLUSTER
    for _ in range(200):
        pick = rng.randrange
        layout = LocalLayout(data_dir, broker=broker, spark_workers=spark_workers,
                             http_base_port=pick(1024, top - 3), raft_base_port=pick(1024, top - 3),
                             gateway_port=pick(1024, top), spark_master_port=pick(1024, top),
                             spark_ui_port=pick(1024, top), broker_base_port=pick(1024, brokers_top))  # fmt: skip
        ports = [port for port, _, _ in layout.needed_ports() + layout.cluster_ports(2)]
        if len(set(ports)) == len(ports) and not any(port_in_use(port) for port in ports):
            return layout
    raise RuntimeError("no free set of ports for kfed local up")


def busy_port(ports: Sequence[tuple[int, str, str]]) -> str | None:
    """The one-line error for the first port something else already holds, naming the flag that moves it."""
    for port, what, flag in ports:
        if port_in_use(port):
            return f"port {port} ({what}) is in use by another program: stop it, or move the port with {flag}"
    return None


class Progress:
    """Startup progress on the terminal: one line per step with its time, and a ticking line while JVMs start."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(f"kfed local: {text} ({time.monotonic() - self.started:.1f} s)", file=self.out, flush=True)

    def wait(self, what: str, work: Callable[[], Any], tick_s: float = 1.0) -> Any:
        """Run ``work`` in a thread, showing how long ``what`` has taken until it returns (or raises).

        The thread is a daemon: a Ctrl-C here leaves at once, and the launchers refuse to start anything
        once they have been stopped."""
        done = threading.Event()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, work()))
            except BaseException as e:  # handed to the waiting thread, which raises it
                outcome.append((False, e))
            done.set()

        threading.Thread(target=run, daemon=True, name=what).start()
        waited = 0
        while not done.wait(tick_s):
            waited += 1
            if self.out.isatty():
                print(f"\r  {what}: {waited * tick_s:.0f} s", end="", file=self.out, flush=True)
            elif waited % 5 == 0:
                print(f"  {what}: {waited * tick_s:.0f} s", file=self.out, flush=True)
        if waited and self.out.isatty():
            print("\r" + " " * (len(what) + 12) + "\r", end="", file=self.out, flush=True)
        ok, value = outcome[0]
        if not ok:
            raise value
        return value


def federation(layout: LocalLayout) -> LocalFederation:
    """The federation ``layout`` describes, not started yet."""
    quorum = LocalQuorum(
        layout.data_dir / "quorum",
        http_ports=[layout.http_base_port + i for i in range(3)],
        raft_ports=[layout.raft_base_port + i for i in range(3)],
        secrets_dir=layout.data_dir,
    )
    clusters = [(f"c{k + 1}", "r1", layout.cluster_base_port(k)) for k in range(layout.clusters)]
    return LocalFederation(
        layout.data_dir, clusters, quorum, broker=layout.broker, brokers_per_cluster=layout.brokers_per_cluster
    )


def run_federation(fed: LocalFederation, progress: Progress) -> None:
    """Start ``fed`` step by step, telling ``progress``."""
    quorum = fed.quorum
    quorum.start()
    progress.wait("electing a controller leader", quorum.wait_ready)
    progress.say(f"3 controllers up: {', '.join(quorum.urls)}")
    what = (
        f"{len(fed.clusters)} sub-clusters of {fed.brokers_per_cluster} {BROKER_NAMES[fed.broker]} "
        f"broker{'s' if fed.brokers_per_cluster > 1 else ''}"
    )
    if fed.broker == "kafka":
        what += " (JVMs: seconds each)"
    progress.wait(f"starting {what}", fed.start_brokers)
    for c in fed.clusters.values():
        progress.say(f"{c.cluster_id} serves on {c.bootstrap}")
        c.start_agent()
    progress.wait("agents registering their sub-clusters", lambda: fed.wait_clusters_healthy(timeout_s=60))
    progress.say(f"agents up: {', '.join(fed.clusters)} registered and healthy")


GATEWAY_START_TIMEOUT_S = 60.0


def start_gateway(quorum: LocalQuorum, port: int, progress: Progress, started: list[subprocess.Popen[bytes]]) -> None:
    """One ``kfed gateway`` on 127.0.0.1:``port``, serving Kafka clients once this returns. Its process joins
    ``started`` as soon as it exists: a Ctrl-C while it starts up stops it with the rest."""
    token = ["--token-file", str(quorum.token_file)] if quorum.token_file else []
    log = quorum.data_dir / "gateway.log"
    command = kfed_command("gateway", "--controller", ",".join(quorum.urls), "--listen", f"127.0.0.1:{port}", *token)
    started.append(proc := spawn(command, log))
    progress.wait("starting the Kafka gateway", lambda: wait_port(port, GATEWAY_START_TIMEOUT_S, proc, log))
    progress.say(f"Kafka gateway serves on 127.0.0.1:{port}")


def _banner(fed: LocalFederation, topic: dict[str, Any], gateway_port: int, spark: SparkCluster | None) -> str:
    quorum = fed.quorum
    spark_lines = (
        f"  Spark master:      {spark.master_url}   UI and JSON API: {spark.ui_url}\n"
        f"  on the cluster:    kfed pipeline demo --master {spark.master_url}\n"
        if spark is not None
        else ""
    )
    first = quorum.urls[0]
    placement = ", ".join(f"P{p['partition']}->{p['cluster_id']}" for p in topic["partitions"])
    clusters = "; ".join(f"{c.cluster_id} {c.bootstrap}" for c in fed.clusters.values())
    return f"""
kfed local federation is up: quorum {", ".join(quorum.urls)}
sub-clusters ({BROKER_NAMES[fed.broker]}): {clusters}
demo topic {DEMO_TOPIC}: {placement}

  API docs:          {first}/docs
  merged metadata:   curl -s {first}/v1/metadata
  one topic:         curl -s '{first}/v1/metadata?topic={DEMO_TOPIC}'
  tail the log:      curl -s '{first}/v1/log?offset=0&wait_ms=10000&metadata_version={LATEST_METADATA_VERSION}'
  stream the log:    curl -sN '{first}/v1/log/stream?offset=0&metadata_version={LATEST_METADATA_VERSION}'
  quorum:            curl -s {first}/v1/quorum
  agent leases:      curl -s {first}/v1/agents
  dashboard:         {first}/ui/
  any Kafka client:  kcat -b 127.0.0.1:{gateway_port} -L   (the gateway: logical topics, unmodified clients)
{spark_lines}  one more cluster:  kfed local cluster add c{len(fed.clusters) + 1}
  admin writes need: -H "Authorization: Bearer $(cat {quorum.token_file})"
                     (kfed cluster/topic/quorum commands use that file by default)
Ctrl-C stops everything.
"""


def local_up(layout: LocalLayout, once: bool = False, out: TextIO | None = None) -> int:
    """``kfed local up``: check every port, start the federation with progress, serve until Ctrl-C."""
    out = out or sys.stdout
    problem = layout.check() or _kafka_missing(layout) or busy_port(layout.needed_ports())
    if problem:
        print(f"kfed local: {problem}", file=sys.stderr)
        return 2
    # Ctrl-C and SIGTERM stop the children too. Ctrl-C's handler is set here as well: Python leaves SIGINT
    # ignored when it starts ignored, as in anything a shell script starts with `&`.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    progress = Progress(out)
    fed = federation(layout)
    state = layout.data_dir / STATE_FILE
    progress.say(f"starting in {layout.data_dir}/ (logs there)")
    spark: SparkCluster | None = None
    gateways: list[subprocess.Popen[bytes]] = []
    try:
        run_federation(fed, progress)
        topic = create_demo_topic(fed)
        start_gateway(fed.quorum, layout.gateway_port, progress, gateways)
        if layout.spark_workers:
            progress.say(f"starting a Spark master and {layout.spark_workers} worker(s)")
            spark = start_spark_cluster(
                layout.data_dir / "spark",
                layout.spark_workers,
                port=layout.spark_master_port,
                ui_port=layout.spark_ui_port,
            )
        print(_banner(fed, topic, layout.gateway_port, spark), file=out, flush=True)
        state.write_text(json.dumps({"pid": os.getpid(), "layout": layout.to_json()}))
        if once:
            return 0
        while True:
            serve_cluster_requests(fed, layout, out)
            print("\r" + status_line(fed).ljust(110), end="", file=out, flush=True)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nkfed local: stopping", file=out, flush=True)
        return 0
    except (TimeoutError, FileNotFoundError, ProcessExited, JarsNotInstalled, SparkClusterError, ValueError) as e:
        print(f"\nkfed local: {e}", file=sys.stderr)
        return 1
    finally:
        # A second Ctrl-C (or the SIGTERM a wrapper sends after relaying the first) would cut the stop short
        # and leave processes running; stopping is bounded (each process is killed after a timeout).
        handlers = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            state.unlink(missing_ok=True)
            if spark is not None:
                spark.stop()
            stop_processes(gateways)
            fed.stop()
        finally:
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])


def _kafka_missing(layout: LocalLayout) -> str | None:
    if layout.broker != "kafka":
        return None
    try:
        installed_libs()
    except JarsNotInstalled as e:
        return str(e)
    return None


# -- kfed local cluster add: a request file the running `kfed local up` serves -----------------------------------
REQUESTS_DIR = "requests"
ADD_TIMEOUT_S = 180.0


def serve_cluster_requests(fed: LocalFederation, layout: LocalLayout, out: TextIO) -> None:
    """Carry out the ``kfed local cluster add`` requests waiting in the data dir (one ``<id>.json`` each):
    start the sub-cluster and its agent here, so that Ctrl-C stops them with the rest."""
    requests = layout.data_dir / REQUESTS_DIR
    for request in sorted(requests.glob("*.json")) if requests.is_dir() else []:
        body = json.loads(request.read_text())
        request.unlink()
        progress_file = request.with_suffix(".progress")
        with open(progress_file, "a") as progress_out:
            try:
                result: dict[str, Any] = {"ok": True, **_add_cluster(fed, layout, body, Progress(progress_out))}
            except Exception as e:  # reported to the requesting command, which prints it
                result = {"ok": False, "error": str(e)}
        print(f"\nkfed local: cluster add {body.get('cluster_id')}: {result.get('error') or 'done'}", file=out)
        _write_atomically(request.with_suffix(".result"), json.dumps(result))


def _add_cluster(fed: LocalFederation, layout: LocalLayout, body: dict[str, Any], progress: Progress) -> dict[str, Any]:
    from metadata_log.commands import check_name
    from metadata_log.errors import InvalidRequest

    cluster_id, region = str(body["cluster_id"]), str(body["region"])
    try:
        check_name(cluster_id, "cluster_id")
        check_name(region, "--region")
    except InvalidRequest as e:
        raise ValueError(e.detail) from None
    if cluster_id in fed.clusters:
        raise ValueError(f"{cluster_id} is already running in this federation")
    index = len(fed.clusters)
    busy = busy_port(layout.cluster_ports(index))
    base = layout.cluster_base_port(index) if busy is None else 0  # taken: free ports instead
    progress.say(f"starting {cluster_id} in {region}: {fed.brokers_per_cluster} {BROKER_NAMES[fed.broker]} broker(s)")
    c = progress.wait(f"starting {cluster_id}'s brokers", lambda: fed.add_cluster(cluster_id, region, base_port=base))
    progress.say(f"{cluster_id} serves on {c.bootstrap}; its agent registers it")
    progress.wait("agent registering", lambda: fed.wait_clusters_healthy([cluster_id], timeout_s=60))
    progress.say(f"{cluster_id} registered in {region} and healthy")
    return {"cluster_id": cluster_id, "region": region, "bootstrap": c.bootstrap}


def cluster_add(
    data_dir: Path, cluster_id: str, region: str, out: TextIO | None = None, timeout_s: float = ADD_TIMEOUT_S
) -> int:
    """``kfed local cluster add``: ask the ``kfed local up`` running on ``data_dir`` to start one more
    sub-cluster with its agent; prints its progress. 0 when it is registered and healthy."""
    out = out or sys.stdout
    from metadata_log.commands import check_name
    from metadata_log.errors import InvalidRequest

    try:
        check_name(cluster_id, "CLUSTER_ID")
        check_name(region, "--region")
    except InvalidRequest as e:
        print(f"kfed local: {e.detail}", file=sys.stderr)
        return 2
    state_path = data_dir / STATE_FILE
    try:
        pid = int(json.loads(state_path.read_text())["pid"])
        os.kill(pid, 0)  # is it still running? (signal 0 checks, sends nothing)
    except (OSError, ValueError, KeyError):
        print(
            f"kfed local: no `kfed local up` is running on {data_dir} (start one, or pass its --data-dir)",
            file=sys.stderr,
        )
        return 2
    requests = data_dir / REQUESTS_DIR
    requests.mkdir(exist_ok=True)
    result_path, progress_path = requests / f"{cluster_id}.result", requests / f"{cluster_id}.progress"
    result_path.unlink(missing_ok=True)
    progress_path.unlink(missing_ok=True)
    _write_atomically(requests / f"{cluster_id}.json", json.dumps({"cluster_id": cluster_id, "region": region}))
    shown = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if progress_path.exists():
            text = progress_path.read_text()
            print(text[shown:], end="", file=out, flush=True)
            shown = len(text)
        if result_path.exists():
            result = json.loads(result_path.read_text())
            if result["ok"]:
                print(f"kfed local: {cluster_id} added: {result['bootstrap']} in {result['region']}", file=out)
                return 0
            print(f"kfed local: cluster add {cluster_id}: {result['error']}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(
        f"kfed local: cluster add {cluster_id}: no answer within {timeout_s:.0f} s (is `kfed local up` busy?)",
        file=sys.stderr,
    )
    return 1


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
