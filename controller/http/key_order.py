"""Strict key order (docs/KEY_ORDER.md), what agents send the leader: the seal points they measured.

An agent measures, ``grace_ms`` after it applied a strict topic's new epoch, the physical end offset of each
partition on its cluster that gave key ranges away in it (``seals_to_measure``), and reports them here; the
leader records them (``KeyOrderSealed``). The topic's next epoch can start once they are all recorded.
"""

from __future__ import annotations

from metadata_log import commands

from .bodies import KeySeals
from .routing import Router, WritePlan
from .topics import render_topic

router = Router(prefix="/v1/agents", tags=["agents"])


@router.write("POST", "/{cluster_id}/key-seals", summary="Record the seal points an agent measured (strict topics)")
def report_key_seals(cluster_id: str, body: KeySeals) -> WritePlan:
    return WritePlan(
        lambda image: commands.record_seals(image, body.topic, body.epoch, body.end_offsets),
        lambda image: render_topic(image, body.topic),
    )
