"""The quorum config file (``quorum.toml``) and node settings."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from metadata_log.errors import InvalidSetting


class ConfigError(InvalidSetting, ValueError):
    """A config file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class Voter:
    id: int
    raft: str  # "host:port"
    http: str  # base URL, e.g. "http://127.0.0.1:8001"


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    voters: tuple[Voter, ...]

    def voter(self, node_id: int) -> Voter:
        for v in self.voters:
            if v.id == node_id:
                return v
        ids = ", ".join(str(v.id) for v in self.voters)
        raise ConfigError(f"node id {node_id} is not a voter in the config (voters: {ids})")

    def by_raft(self, raft: str) -> Voter | None:
        return next((v for v in self.voters if v.raft == raft), None)

    def changed(self, changes: Iterable[tuple[Voter, bool]]) -> QuorumConfig:
        """The voters after membership changes recorded in the log: (voter, still a voter) each."""
        voters = {v.id: v for v in self.voters}
        for voter, present in changes:
            if present:
                voters[voter.id] = voter
            else:
                voters.pop(voter.id, None)
        return QuorumConfig(tuple(sorted(voters.values(), key=lambda v: v.id)))


def parse_quorum(data: dict[str, Any], source: str = "config") -> QuorumConfig:
    voters_raw = data.get("voters")
    if not isinstance(voters_raw, list) or not voters_raw:
        raise ConfigError(f"{source}: needs at least one [[voters]] table with id, raft and http")
    voters = []
    for i, v in enumerate(voters_raw):
        where = f"{source}: voters[{i}]"
        if not isinstance(v, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = set(v) - {"id", "raft", "http"}
        if unknown:
            raise ConfigError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        vid, raft, http = v.get("id"), v.get("raft"), v.get("http")
        if not isinstance(vid, int) or isinstance(vid, bool) or vid < 0:
            raise ConfigError(f"{where}.id must be a non-negative integer (e.g. a StatefulSet pod index)")
        if not isinstance(raft, str) or ":" not in raft or not raft.rsplit(":", 1)[1].isdigit():
            raise ConfigError(f'{where}.raft must be "host:port", got {raft!r}')
        url = urlparse(http) if isinstance(http, str) else None
        if not isinstance(http, str) or url is None or url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(f"{where}.http must be an http(s) URL, got {http!r}")
        voters.append(Voter(vid, raft, http.rstrip("/")))
    for attr in ("id", "raft", "http"):
        values = [getattr(v, attr) for v in voters]
        if len(set(values)) != len(values):
            raise ConfigError(f"{source}: two voters share the same {attr}")
    return QuorumConfig(tuple(voters))


def load_quorum(path: Path) -> QuorumConfig:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    return parse_quorum(data, str(path))


def render_quorum(voters: list[Voter]) -> str:
    """The TOML text of a quorum config (used by ``kfed local up``)."""
    lines = []
    for v in voters:
        lines += ["[[voters]]", f"id = {v.id}", f'raft = "{v.raft}"', f'http = "{v.http}"', ""]
    return "\n".join(lines)
