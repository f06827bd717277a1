"""``kfed controller``'s command line: its defaults are the Raft layer's."""

from __future__ import annotations

import argparse

from kfed.cli import build_parser, raft_settings
from metadata_log.raft import RaftSettings

NODE = ["controller", "--config", "q.toml", "--node-id", "1", "--data-dir", "d"]


def controller_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*NODE, *argv])


def test_controller_defaults_are_the_raft_layers() -> None:
    """A node started with default flags runs ``RaftSettings()``: bench/image.py counts on it (and reads the
    compaction defaults from ``RaftSettings`` without importing the CLI)."""
    assert raft_settings(controller_args(), password=None) == RaftSettings()
    assert raft_settings(controller_args("--compaction-period-s", "7"), None).compaction_min_s == 7
