"""Child processes of the local launchers: free ports, logs to files, stopped by PID.

Only processes started here are ever signalled, and only by their own PID.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Self

from metadata_log.errors import KfedError

STOP_GRACE_S = 5.0


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORTS_BELOW_EPHEMERAL = 12_000
"""How many ports under the kernel's ephemeral range ``free_ports`` picks from."""


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now, distinct, picked at random *below* the kernel's ephemeral range.

    A port of that range, free when picked, can be taken before its server binds it as the source port of any
    outgoing connection; the server then cannot bind it until that connection ends (pysyncobj retries in
    silence: a Raft node that never joined its quorum). Below the range only servers take ports. Where there is
    no room below it, any port the kernel gives."""
    low = ephemeral_low()
    first = low - PORTS_BELOW_EPHEMERAL
    share = range(first, low)[_worker_slice()]
    candidates: list[int] = []
    if first >= 1024:
        fresh = [port for port in share if port not in _handed_out]
        if len(fresh) < count + len(share) // 4:  # most handed out already: start over
            _handed_out.clear()
            fresh = list(share)
        candidates = random.sample(fresh, len(fresh))
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            s = socket.socket()
            sockets.append(s)
            try:
                s.bind(("127.0.0.1", candidates.pop() if candidates else 0))
            except OSError:  # taken: the next candidate
                sockets.pop().close()
        ports = [s.getsockname()[1] for s in sockets]
        _handed_out.update(ports)
        return ports
    finally:
        for s in sockets:
            s.close()


_handed_out: set[int] = set()
"""Ports ``free_ports`` gave this process: not given again (while most of the share is left). A server may bind
its port seconds later (a JVM starting), or be stopped and started again on it (a broker a test killed): in
between the port looks free, and handing it out again would make one of the two fail to bind."""


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (the source ports of outgoing connections); 0 unknown."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _worker_slice() -> slice:
    """The share of the ports below the ephemeral range this process picks from: all of them, or, in a test
    run split over pytest-xdist's workers (its ``PYTEST_XDIST_WORKER`` ``gwN`` of ``PYTEST_XDIST_WORKER_COUNT``,
    inherited by every process a test starts), every N-th one from the worker's index. A port another worker
    picked but has not bound yet is then never picked here."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        index, count = int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    except (KeyError, ValueError):
        return slice(None)
    return slice(index % count, None, count) if count > 0 else slice(None)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on (or holds) ``host:port``: binding it fails."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to a listener
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def spawn(args: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``args`` in its own session (a Ctrl-C of the terminal is ours to relay), output appended to
    ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(list(args), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    finally:
        log_file.close()


def stop_processes(procs: Sequence[subprocess.Popen[Any]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM each, then SIGKILL what is still running after the grace period. Only our own PIDs."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def kill_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGKILL) -> None:
    """Signal one of our children if it still runs; after SIGKILL, reap it."""
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait()


def wait_port(
    port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    """Until something accepts connections on 127.0.0.1:``port``; fails early when ``proc`` exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise ProcessExited(f"exited with status {proc.returncode} before listening on {port}", log) from None
            if time.monotonic() > deadline:
                where = f"; log: {log}" if log else ""
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s{where}") from None
            time.sleep(0.02)


class ProcessExited(KfedError, RuntimeError):
    """A child process ended while it was being started; the message ends with its log's last lines."""

    def __init__(self, what: str, log: Path | None) -> None:
        tail = ""
        if log is not None and log.exists():
            lines = log.read_text(errors="replace").splitlines()[-8:]
            tail = f"; log {log} ends with:\n  " + "\n  ".join(lines)
        super().__init__(what + tail)


class Processes:
    """``start()`` on entering, ``stop()`` on leaving — also when ``start()`` fails halfway, so no child
    process outlives a failed launch."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
