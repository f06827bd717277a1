"""The ``kfed`` command line: one table of command groups, each loaded when its command is parsed; ``kfed
controller`` is secure by default and its defaults are the Raft layer's."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from kfed.cli import GROUPS, build_parser
from kfed.controller import SECURITY_FLAGS, missing_secrets, raft_settings
from metadata_quorum import RaftSettings

NODE = ["controller", "--config", "q.toml", "--node-id", "1", "--data-dir", "d"]
SECRETS = ["--raft-secret-file", "raft.secret", "--admin-token-file", "admin.token"]


def controller_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*NODE, *argv])


def test_missing_secrets_names_each_secret_flag_left_out() -> None:
    assert missing_secrets(controller_args(*SECRETS)) == []
    assert missing_secrets(controller_args("--admin-token-file", "a")) == ["--raft-secret-file"]
    assert missing_secrets(controller_args("--raft-secret-file", "r")) == ["--admin-token-file"]
    assert missing_secrets(controller_args()) == ["--raft-secret-file", "--admin-token-file"]
    assert missing_secrets(controller_args("--insecure")) == list(SECURITY_FLAGS)  # --insecure waives, not fills


def test_insecure_is_off_unless_given() -> None:
    assert controller_args(*SECRETS).insecure is False
    assert controller_args("--insecure").insecure is True


def test_controller_defaults_are_the_raft_layers() -> None:
    """A node started with default flags runs ``RaftSettings()``: bench/image.py counts on it (and reads the
    compaction defaults from ``RaftSettings`` without importing the CLI)."""
    assert raft_settings(controller_args(*SECRETS), password=None) == RaftSettings()
    assert raft_settings(controller_args("--compaction-period-s", "7"), None).compaction_min_s == 7


def test_every_command_group_has_add_arguments_and_run() -> None:
    for group in GROUPS:
        module = group.load()
        assert callable(module.add_arguments) and callable(module.run), group.module
    assert len({g.name for g in GROUPS}) == len(GROUPS)


def test_a_command_line_loads_only_its_own_group() -> None:
    """``kfed topic ...`` starts without importing the gateway, the controller, the Raft layer or Spark;
    ``kfed gateway`` imports the gateway."""
    probe = (
        "import sys; from kfed.cli import build_parser; build_parser().parse_args(sys.argv[1:]); "
        "print(' '.join(m for m in ('kfed.topic', 'gateway.cli', 'controller.node', 'controller.config', "
        "'metadata_quorum', 'pysyncobj', 'pyspark', 'deploy') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[3]

    def loaded(*argv: str) -> list[str]:
        run = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=root)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert loaded("topic", "status", "T") == ["kfed.topic"]
    assert loaded("gateway", "--controller", "http://127.0.0.1:8001") == ["gateway.cli"]


def test_the_gateways_log_level_may_come_before_or_after_the_command() -> None:
    gateway = ["gateway", "--controller", "http://127.0.0.1:8001"]
    assert build_parser().parse_args(gateway).log_level == "INFO"
    assert build_parser().parse_args(["--log-level", "DEBUG", *gateway]).log_level == "DEBUG"
    assert build_parser().parse_args([*gateway, "--log-level", "DEBUG"]).log_level == "DEBUG"
