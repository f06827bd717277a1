"""``kfed controller`` is secure by default, through the real command in its own process: without the Raft
secret or the admin token it refuses to start (naming the flag) unless told ``--insecure``; a gateway
without the admin token exits, naming the flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from controller.config import Voter, render_quorum
from deploy.launcher import free_ports, stop_processes
from metadata_client.access import write_secret
from tests.waiting import wait_until


def one_voter(tmp_path: Path) -> tuple[list[str], str]:
    """The ``kfed controller`` command of a one-voter quorum on free ports (no secret flags), and its URL."""
    raft_port, http_port = free_ports(2)
    url = f"http://127.0.0.1:{http_port}"
    config = tmp_path / "quorum.toml"
    config.write_text(render_quorum([Voter(1, f"127.0.0.1:{raft_port}", url)]))
    command = [sys.executable, "-m", "kfed", "controller", "--config", str(config), "--node-id", "1",
               "--data-dir", str(tmp_path / "node")]  # fmt: skip
    return command, url


def started(command: list[str], url: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The node ``command`` starts, once it answers /readyz (its output in ``log_path``)."""
    with open(log_path, "wb") as log_file:
        node = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(timeout=1) as client:

            def ready() -> bool:
                assert node.poll() is None, log_path.read_text()
                try:
                    return client.get(url + "/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(ready, 60, "the node answers /readyz")
    except BaseException:
        stop_processes([node])
        raise
    return node


@pytest.mark.parametrize(
    "given, missing",
    [
        (["--admin-token-file"], ["--raft-secret-file"]),
        (["--raft-secret-file"], ["--admin-token-file"]),
        ([], ["--raft-secret-file", "--admin-token-file"]),
    ],
)
def test_a_controller_without_a_secret_refuses_to_start_and_names_it(
    tmp_path: Path, given: list[str], missing: list[str]
) -> None:
    command, _ = one_voter(tmp_path)
    for flag in given:
        command += [flag, str(tmp_path / flag.removeprefix("--"))]
        write_secret(tmp_path / flag.removeprefix("--"))
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(" is required")[0] for line in lines] == [f"kfed controller: {flag}" for flag in missing]
    assert all("pass --insecure" in line for line in lines)
    assert not (tmp_path / "node").exists()  # refused before the node touched its data dir (or any port)


def test_a_controller_given_insecure_starts_and_warns(tmp_path: Path) -> None:
    command, url = one_voter(tmp_path)
    log_path = tmp_path / "node.log"
    stop_processes([started([*command, "--insecure"], url, log_path)])
    log = log_path.read_text()
    for flag in ("--raft-secret-file", "--admin-token-file"):
        assert f"INSECURE (--insecure): started without {flag}" in log


def test_a_gateway_without_the_admin_token_exits_and_names_the_flag(tmp_path: Path) -> None:
    """Against a secure quorum, a gateway started without ``--token-file`` cannot register: it exits at once
    (code 2) with the flag to give, instead of retrying forever without listening."""
    command, url = one_voter(tmp_path)
    for flag in ("--admin-token-file", "--raft-secret-file"):
        command += [flag, str(tmp_path / flag.removeprefix("--"))]
        write_secret(tmp_path / flag.removeprefix("--"))
    node = started(command, url, tmp_path / "node.log")
    try:
        listen = f"127.0.0.1:{free_ports(1)[0]}"
        gateway = [sys.executable, "-m", "kfed", "gateway", "--controller", url, "--listen", listen]
        result = subprocess.run(gateway, capture_output=True, text=True, timeout=60)
    finally:
        stop_processes([node])
    assert result.returncode == 2, result.stderr
    assert "kfed gateway: the controllers refuse to register this gateway" in result.stderr
    assert "--token-file" in result.stderr and "Traceback" not in result.stderr
