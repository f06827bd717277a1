"""What the quorum records about itself: controllers added or removed after its config was written, and the
metadata version every voter reads (Kafka's ``FeaturesImage``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..records import LATEST_METADATA_VERSION, MetadataVersionChanged, NewerMetadataVersion, QuorumVoterChanged
from .common import InvalidRecord


@dataclass(frozen=True, slots=True)
class VoterImage:
    """A controller added to (voter) or removed from (not voter) the quorum after its config was written."""

    voter_id: int
    raft: str
    http: str
    voter: bool


class QuorumDelta:
    """Changes to the voters and the metadata version over ``voters`` and ``metadata_version``."""

    __slots__ = ("_base", "_changed", "metadata_version")

    def __init__(self, voters: Mapping[int, VoterImage], metadata_version: int) -> None:
        self._base = voters
        self._changed: dict[int, VoterImage] | None = None
        self.metadata_version = metadata_version

    def replay_voter(self, record: QuorumVoterChanged) -> None:
        if self._changed is None:
            self._changed = dict(self._base)
        self._changed[record.voter_id] = VoterImage(record.voter_id, record.raft, record.http, record.voter)

    def replay_metadata_version(self, record: MetadataVersionChanged) -> None:
        """Up or the same only; ``NewerMetadataVersion`` (not ``InvalidRecord``: it depends on this node's code,
        not on the image) for one this code does not read."""
        if record.version < self.metadata_version:
            raise InvalidRecord(f"metadata version {self.metadata_version} cannot go back to {record.version}")
        if record.version > LATEST_METADATA_VERSION:
            raise NewerMetadataVersion(record.version)
        self.metadata_version = record.version

    def voters(self) -> Mapping[int, VoterImage]:
        return self._changed if self._changed is not None else self._base
