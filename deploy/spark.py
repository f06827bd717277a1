"""A Spark standalone cluster on this machine: a master and N workers as real processes.

``kfed local up --spark-workers N`` starts one next to the federation (master ``spark://127.0.0.1:7077``, its
web UI and JSON API on 8080); tests and benchmarks start theirs on free ports. The pyspark wheel holds Spark's
whole standalone cluster manager but none of its ``sbin/start-*.sh`` scripts, so each daemon is started with
``$SPARK_HOME/bin/spark-class`` (which ``exec``s the JVM: the PID we keep is the daemon's own)::

    spark-class org.apache.spark.deploy.master.Master --host H --port P --webui-port U
    spark-class org.apache.spark.deploy.worker.Worker --cores C --memory M ... spark://H:P

``SPARK_HOME`` is the installed ``pyspark`` package folder. Every daemon logs to a file under the data dir.
A worker runs each application's executor as a child JVM, and each executor runs PySpark's Python daemon,
which puts itself in a process group of its own. All of them inherit ``KFED_SPARK_CLUSTER=<token>`` from the
daemon's environment, a token unique to this ``SparkCluster``. ``stop()`` signals the daemons by PID, then
kills by PID any process still carrying that token, so nothing a cluster started outlives it.

Resources are bounded: each worker offers ``worker_cores`` cores and ``worker_memory`` of executor memory, and
the daemons themselves run with a ``DAEMON_MEMORY`` heap (Spark's default is 1g each).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import httpx

from deploy.launcher import free_ports
from deploy.processes import Processes
from metadata_log.errors import KfedError

MASTER_PORT: Final = 7077
UI_PORT: Final = 8080
HOST: Final = "127.0.0.1"
DEFAULT_WORKER_CORES: Final = 1
DEFAULT_WORKER_MEMORY: Final = "1g"
"""Executor memory a worker offers; an application's executors (``spark.executor.memory``, 1g by default) must
fit in it, or the master gives that application no executor on the worker."""
DAEMON_MEMORY: Final = "256m"
"""Heap of the master and worker daemons (``SPARK_DAEMON_MEMORY``): they only schedule and supervise."""
READY_TIMEOUT_S: Final = 180.0
"""Daemons are up in seconds, but a worker on a loaded 2-core machine can take minutes to register."""
HTTP_TIMEOUT_S: Final = 10.0
"""For the daemons' JSON API: a loaded machine's JVM (GC, JIT) can take seconds to answer."""
STOP_GRACE_S: Final = 10.0
"""A worker's SIGTERM handler kills its executors before it exits: give it that long before SIGKILL."""
MARKER_ENV: Final = "KFED_SPARK_CLUSTER"
MASTER_OPTS: Final = "-Dspark.master.rest.enabled=false"
"""No REST submission server: it listens on a fixed port (6066) and takes unauthenticated submissions."""

MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(KfedError, RuntimeError):
    """The standalone cluster did not start (the message names the daemon and its log file)."""


def spark_home() -> Path:
    """The installed ``pyspark`` package folder, which is a complete ``SPARK_HOME`` (``bin/``, ``jars/``).
    Found without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkClusterError("pyspark is not installed: it holds the standalone cluster's jars and scripts")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").exists():
        raise SparkClusterError(f"{home} has no bin/spark-class")
    return home


@dataclass
class SparkWorker:
    """One worker daemon: its RPC and web UI ports, its work dir (executors run in sub-dirs of it), its process."""

    index: int
    port: int
    ui_port: int
    work_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class SparkCluster(Processes):
    """A standalone master and ``workers`` workers on loopback. ``port``/``ui_port`` 0: free ones.

    ``with SparkCluster(dir, 2) as cluster:`` starts them and waits until the master's JSON API lists every
    worker ALIVE; leaving stops them all (also when starting failed halfway)."""

    def __init__(
        self,
        data_dir: Path,
        workers: int = 2,
        *,
        port: int = 0,
        ui_port: int = 0,
        worker_cores: int = DEFAULT_WORKER_CORES,
        worker_memory: str = DEFAULT_WORKER_MEMORY,
    ) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if worker_cores < 1:
            raise ValueError(f"worker_cores must be >= 1, got {worker_cores}")
        self.data_dir = data_dir
        self.home = spark_home()
        free = iter(free_ports(2 + 2 * workers))
        self.port = port or next(free)
        self.ui_port = ui_port or next(free)
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.workers = [SparkWorker(i, next(free), next(free), data_dir / f"worker-{i}") for i in range(1, workers + 1)]
        self.master: subprocess.Popen[bytes] | None = None
        self.token = uuid.uuid4().hex
        self._http = httpx.Client(timeout=HTTP_TIMEOUT_S)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        """The master's web UI; its JSON API is ``ui_url + "/json/"``."""
        return f"http://{HOST}:{self.ui_port}"

    # -- processes --------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        # Configured here only: a launching shell's SPARK_HOME or SPARK_CONF_DIR could start another Spark's jars
        # or settings.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        # PYTHONPATH reaches every executor's Python workers (Spark merges the executor's own into theirs):
        # with it, executors could import kfed from wherever the launching shell pointed, not from what an
        # application ships.
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "SPARK_HOME": str(self.home),
                "SPARK_LOCAL_IP": HOST,
                "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                "SPARK_MASTER_OPTS": MASTER_OPTS,
                MARKER_ENV: self.token,
            }
        )
        return env

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file: IO[bytes] = open(self.data_dir / log_name, "ab")  # noqa: SIM115 - owned by the child
        try:
            return subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), *args],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.data_dir,
                start_new_session=True,
            )
        finally:
            log_file.close()

    def start(self) -> None:
        """Start the master, then every worker; return once the master lists them all ALIVE."""
        self.master = self._spawn(
            [MASTER_CLASS, "--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port)], "master.log"
        )
        self._wait(lambda s: s.get("status") == "ALIVE", "the master", "master.log")
        for w in self.workers:
            self.start_worker(w.index, wait=False)
        self.wait_workers(len(self.workers))

    def start_worker(self, index: int, *, wait: bool = True) -> SparkWorker:
        """Start worker ``index`` (1-based), e.g. again after ``kill_worker``: it registers as a new worker."""
        w = self.workers[index - 1]
        if w.running():
            raise SparkClusterError(f"worker {index} is running already")
        w.work_dir.mkdir(parents=True, exist_ok=True)
        args = [
            WORKER_CLASS,
            "--host",
            HOST,
            "--port",
            str(w.port),
            "--webui-port",
            str(w.ui_port),
            "--cores",
            str(self.worker_cores),
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(w.work_dir),
            self.master_url,
        ]
        w.proc = self._spawn(args, f"worker-{index}.log")
        if wait:
            self.wait_workers(sum(1 for x in self.workers if x.running()))
        return w

    def kill_worker(self, index: int) -> None:
        """kill -9 of worker ``index``'s daemon. Its executors notice the lost connection and exit themselves."""
        w = self.workers[index - 1]
        if w.proc is not None and w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGKILL)
            w.proc.wait()

    def stop(self) -> None:
        """SIGTERM the workers (they kill their executors), then the master; SIGKILL what is left after the grace
        period; then kill by PID every process still carrying this cluster's token (executors, Python daemons)."""
        procs = [w.proc for w in self.workers if w.proc is not None]
        for group in (procs, [self.master] if self.master is not None else []):
            for p in group:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            for p in group:
                try:
                    p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for pid in self.leftover_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._http.close()

    def leftover_pids(self) -> list[int]:
        """PIDs of live processes started by this cluster (they carry its token), daemons excluded."""
        daemons = {p.pid for p in [self.master, *(w.proc for w in self.workers)] if p is not None and p.poll() is None}
        return [pid for pid in pids_with_env(MARKER_ENV, self.token) if pid not in daemons]

    # -- state ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The master's JSON API (``/json/``): ``status``, ``workers``, ``activeapps``, ``completedapps``..."""
        return dict(self._http.get(f"{self.ui_url}/json/").json())

    def worker_state(self, index: int) -> dict[str, Any]:
        """Worker ``index``'s JSON API: its ``executors`` and ``finishedexecutors`` (with their ``appid``)."""
        return dict(self._http.get(f"{self.workers[index - 1].ui_url}/json/").json())

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def wait_workers(self, count: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until the master lists exactly ``count`` workers ALIVE."""
        self._wait(
            lambda s: sum(w.get("state") == "ALIVE" for w in s.get("workers", [])) == count,
            f"{count} alive workers",
            "worker-*.log",
            timeout_s,
        )

    def _wait(self, ready: Any, what: str, log_name: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while True:
            if self.master is None or self.master.poll() is not None:
                raise SparkClusterError(f"the Spark master exited; see {self.data_dir / 'master.log'}")
            try:
                last = self.state()
                if ready(last):
                    return
            except (httpx.HTTPError, ValueError) as e:
                last = e
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"no {what} after {timeout_s:.0f} s (last: {last}); see {self.data_dir}/{log_name}"
                )
            time.sleep(0.2)


def pids_with_env(name: str, value: str) -> list[int]:
    """Live PIDs whose environment has ``name=value`` (Linux ``/proc``; elsewhere none are found)."""
    needle = f"{name}={value}".encode()
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return out


def start_spark_cluster(
    data_dir: Path, workers: int, *, port: int = MASTER_PORT, ui_port: int = UI_PORT
) -> SparkCluster:
    """For ``kfed local up --spark-workers N``: a started cluster on the fixed ports (7077, UI 8080);
    ``cluster.master_url`` and ``cluster.ui_url`` are what to print, ``cluster.stop()`` stops it all."""
    cluster = SparkCluster(data_dir, workers, port=port, ui_port=ui_port)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster
