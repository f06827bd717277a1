"""``kfed controller``'s command line: secure by default, and its defaults are the Raft layer's."""

from __future__ import annotations

import argparse

from kfed.cli import SECURITY_FLAGS, build_parser, missing_secrets, raft_settings
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
