"""``kfed local up`` and ``kfed local cluster add`` as a person runs them: real commands, real processes.

Every test picks free base ports (never the fixed local ones: someone may be running ``kfed local up``).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from deploy import local_up as local_up_module
from deploy.launcher import BrokerKind
from deploy.local_up import LocalLayout, free_layout, local_up
from deploy.processes import port_in_use
from kfed.cli import main as kfed
from tests.waiting import wait_until

UP_LINE = "kfed local federation is up"
END_LINE = "Ctrl-C stops everything."  # the banner's last line


class Output:
    """What a process prints, read by a thread from the start: ``kfed local up`` rewrites its status line every
    second, and a pipe nobody reads fills up and stops it in ``print``, its Ctrl-C handling included."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._proc, self._stdout = proc, proc.stdout
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.append(line)

    def through(self, text: str) -> list[str] | None:
        """The lines up to the first with ``text``; all of them once the process ended without one."""
        lines = list(self.lines)
        for i, line in enumerate(lines):
            if text in line:
                return lines[: i + 1]
        if self._proc.poll() is None or self._reader.is_alive():
            return None
        return lines or ["(it printed nothing)\n"]

    def tail(self, chars: int = 4000) -> str:
        return "".join(self.lines)[-chars:]


def process_state(pid: int) -> str:
    """What a process that does not stop is doing: its state, where it waits, and its signal masks."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as e:
        return f"no state: {e}"
    wanted = ("State", "SigBlk", "SigIgn", "SigCgt", "Threads")
    return ", ".join([*(line for line in status if line.startswith(wanted)), f"wchan: {wchan}"])


def up_args(layout: LocalLayout) -> list[str]:
    return ["local", "up", "--data-dir", str(layout.data_dir), "--broker", layout.broker,
            "--http-base-port", str(layout.http_base_port), "--raft-base-port", str(layout.raft_base_port),
            "--broker-base-port", str(layout.broker_base_port), "--gateway-port", str(layout.gateway_port),
            "--spark-workers", str(layout.spark_workers),
            "--spark-master-port", str(layout.spark_master_port),
            "--spark-ui-port", str(layout.spark_ui_port)]  # fmt: skip


@pytest.mark.parametrize("held", ["http", "raft", "broker", "kraft-controller", "gateway", "spark-master", "spark-ui"])
def test_a_busy_port_is_one_line_naming_it_and_the_flag_that_moves_it_and_nothing_starts(
    tmp_path: Path, held: str, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = free_layout(tmp_path / "local", spark_workers=1 if held.startswith("spark") else 0)
    port, flag = {
        "http": (layout.http_base_port + 1, "--http-base-port"),
        "raft": (layout.raft_base_port + 2, "--raft-base-port"),
        "broker": (layout.broker_base_port + 10_000, "--broker-base-port"),  # c2's broker
        "kraft-controller": (layout.broker_base_port + 100, "--broker-base-port"),  # c1's KRaft controller
        "gateway": (layout.gateway_port, "--gateway-port"),
        "spark-master": (layout.spark_master_port, "--spark-master-port"),
        "spark-ui": (layout.spark_ui_port, "--spark-ui-port"),
    }[held]
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        assert local_up(layout, once=True, out=io.StringIO()) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"port {port}" in err and flag in err and "Traceback" not in err
    assert not (layout.data_dir / "quorum").exists(), "nothing was started"


@pytest.mark.slow
def test_ctrl_c_while_the_gateway_starts_stops_the_gateway_with_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C just after the agents are up, while the gateway starts, stops the gateway too: left running,
    it held port 9092 and the next ``make run`` stopped at "port 9092 is in use"."""
    layout = free_layout(tmp_path / "local", "tansu")
    spawned: list[subprocess.Popen[bytes]] = []
    spawn = local_up_module.spawn

    def recorded(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        spawned.append(proc := spawn(*args, **kwargs))
        return proc

    def ctrl_c(*args: Any, **kwargs: Any) -> None:  # while waiting for the gateway's port
        assert spawned, "the gateway was started"
        raise KeyboardInterrupt

    monkeypatch.setattr(local_up_module, "spawn", recorded)
    monkeypatch.setattr(local_up_module, "wait_port", ctrl_c)
    assert local_up(layout, out=io.StringIO()) == 0
    assert [proc.poll() is not None for proc in spawned] == [True], "the gateway process was stopped"
    ports = [port for port, _, _ in layout.needed_ports()]
    wait_until(lambda: not any(port_in_use(p) for p in ports), 30, "every port released: nothing left running")


@pytest.mark.slow
@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_local_up_then_cluster_add_lets_the_readme_expand_onto_c3_and_ctrl_c_stops_everything(
    tmp_path: Path, broker: BrokerKind
) -> None:
    """The Tansu run also starts a Spark standalone master with one worker (--spark-workers 1)."""
    layout = free_layout(tmp_path / "local", broker, spark_workers=1 if broker == "tansu" else 0)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = str(Path(sys.executable).parent / "kfed")  # the installed command, as a person runs it
    # Started with SIGINT ignored, as a shell script's `kfed local up &` is (and this test was, in CI): Ctrl-C
    # must stop it all the same.
    ignoring_ctrl_c = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]
    up = subprocess.Popen([*ignoring_ctrl_c, command, *up_args(layout)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    output = Output(up)
    try:
        lines = wait_until(lambda: output.through(END_LINE), 600, f"the banner, or the exit of {command}")
        assert any(UP_LINE in line for line in lines), "".join(lines)
        assert any("c1 serves on" in line for line in lines), "startup prints progress"
        if layout.spark_workers:
            spark_ui = f"http://127.0.0.1:{layout.spark_ui_port}"
            assert any(f"spark://127.0.0.1:{layout.spark_master_port}" in line and spark_ui in line for line in lines)
            master = httpx.get(f"{spark_ui}/json/", timeout=10).json()
            assert [w["state"] for w in master["workers"]] == ["ALIVE"], master["workers"]
        # any Kafka client sees the federation through the gateway: the demo topic and its 8 partitions
        gateway = AdminClient({"bootstrap.servers": f"127.0.0.1:{layout.gateway_port}"})
        listed = gateway.list_topics(timeout=20).topics
        assert "U_TopicA" in listed, f"the gateway listed {sorted(listed)}; kfed local up printed: {output.tail()}"
        assert len(listed["U_TopicA"].partitions) == 8
        controller = f"http://127.0.0.1:{layout.http_base_port}"
        token = ["--token-file", str(layout.data_dir / "admin.token")]
        assert kfed(["local", "cluster", "add", "c3", "--data-dir", str(layout.data_dir)]) == 0
        assert kfed(["topic", "expand", "U_TopicA", "--cluster", "c3", "--partitions", "4",
                     "--controller", controller, *token]) == 0  # fmt: skip
        c3_port = layout.broker_base_port + 2 * 10_000
        assert port_in_use(c3_port), "c3 listens on the third sub-cluster's port"
        assert kfed(["local", "cluster", "add", "c3", "--data-dir", str(layout.data_dir)]) == 1, "already running"
    finally:
        up.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            state = process_state(up.pid)
            up.terminate()  # SIGTERM stops what it started
            up.wait(120)
            raise AssertionError(f"still running 120 s after Ctrl-C ({state}); it printed: {output.tail()}") from None
    ports = [port for port, _, _ in layout.needed_ports()] + [layout.broker_base_port + 2 * 10_000]
    wait_until(lambda: not any(port_in_use(p) for p in ports), 30, "every port released: nothing left running")
    assert up.returncode == 0
