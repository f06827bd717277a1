"""Agent leases: soft state on the leader, turned into fencing records only when something changes.

A heartbeat renews its cluster's lease in memory (never a log record). ``decide`` compares the leases
with the image and returns the records to propose: ``ClusterFenced`` when a lease expired or the agent
reported its cluster unhealthy, ``ClusterUnfenced`` when a fenced cluster's agent reports it healthy
again. A node that just became leader has no leases: it gives every agent one full lease to find it
before fencing anybody; a cluster registered meanwhile (by an operator, before its agent runs) gets one
full lease from when this leader first saw it. Pure: the caller passes the clocks in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from metadata_log.image import MetadataImage
from metadata_log.records import ClusterFenced, ClusterUnfenced

FencingRecord = ClusterFenced | ClusterUnfenced

DEFAULT_LEASE_MS: Final = 3000
DEFAULT_HEARTBEAT_MS: Final = 500
LEASE_EXPIRED: Final = "agent lease expired"


@dataclass(frozen=True, slots=True)
class Lease:
    cluster_id: str
    expires_at_s: float  # monotonic
    healthy: bool
    reason: str | None
    applied_offset: int
    last_beat_ms: int  # wall clock, for display


class LeaseTable:
    def __init__(self, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        if lease_ms < 1:
            raise ValueError("lease_ms must be positive")
        self.lease_ms = lease_ms
        self._leases: dict[str, Lease] = {}
        self._first_seen_s: dict[str, float] = {}  # clusters without a lease: when this leader first saw them
        self._term_start_s: float | None = None  # set until the first decision of a term

    def start_term(self, now_s: float) -> None:
        """This node just became leader: forget old leases and give every agent a full lease to beat."""
        self._leases.clear()
        self._first_seen_s.clear()
        self._term_start_s = now_s

    def beat(
        self, cluster_id: str, healthy: bool, reason: str | None, applied_offset: int, now_s: float, now_ms: int
    ) -> Lease:
        lease = Lease(cluster_id, now_s + self.lease_ms / 1000, healthy, reason, applied_offset, now_ms)
        self._leases[cluster_id] = lease
        return lease

    def get(self, cluster_id: str) -> Lease | None:
        return self._leases.get(cluster_id)

    def decide(self, image: MetadataImage, now_s: float, now_ms: int) -> list[FencingRecord]:
        """Records that bring each cluster's fencing in line with its lease: per cluster a fence, an unfence,
        or — when its agent reports a new reason while it is fenced — an unfence and a fence, to commit together."""
        records: list[FencingRecord] = []
        if self._term_start_s is not None:  # clusters there when the term began count from its start
            for cluster_id in image.clusters:
                self._first_seen_s.setdefault(cluster_id, self._term_start_s)
            self._term_start_s = None
        for cluster in image.clusters.values():
            if cluster.state == "decommissioned":
                continue
            lease = self._leases.get(cluster.cluster_id)
            if lease is None:
                first_seen = self._first_seen_s.setdefault(cluster.cluster_id, now_s)
                reason = LEASE_EXPIRED if now_s >= first_seen + self.lease_ms / 1000 else None
            elif now_s >= lease.expires_at_s:
                reason = LEASE_EXPIRED
            elif not lease.healthy:
                reason = lease.reason or "agent reported the cluster unhealthy"
            else:
                reason = None
            if reason is not None and not cluster.fenced:
                records.append(ClusterFenced(cluster.cluster_id, reason, now_ms))
            elif reason is None and cluster.fenced and lease is not None:
                records.append(ClusterUnfenced(cluster.cluster_id, now_ms))
            elif (
                reason is not None
                and cluster.fenced
                and lease is not None
                and lease.reason == reason != cluster.fenced_reason
            ):
                # The agent of a fenced cluster says why anew, e.g. it came back from an outage without its
                # data: the log keeps the new reason. Unfence + fence are one batch (see enforce_leases), so
                # no reader ever sees the cluster unfenced.
                records += [
                    ClusterUnfenced(cluster.cluster_id, now_ms),
                    ClusterFenced(cluster.cluster_id, reason, now_ms),
                ]
        return records

    def view(self, now_s: float) -> list[dict[str, Any]]:
        return [
            {
                "cluster_id": lease.cluster_id,
                "healthy": lease.healthy,
                "reason": lease.reason,
                "applied_offset": lease.applied_offset,
                "last_heartbeat_ms": lease.last_beat_ms,
                "lease_remaining_ms": max(0, int((lease.expires_at_s - now_s) * 1000)),
            }
            for lease in sorted(self._leases.values(), key=lambda lease: lease.cluster_id)
        ]
