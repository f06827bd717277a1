"""JSON-ready views of an image: the merged metadata of ``GET /v1/metadata`` and the admin replies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .image import ClusterImage, MetadataImage, PartitionImage, TopicImage, is_writable
from .image.key_order_replay import key_order_view


def cluster_view(cluster: ClusterImage) -> dict[str, Any]:
    return {
        "cluster_id": cluster.cluster_id,
        "region": cluster.region,
        "bootstrap_servers": cluster.bootstrap_servers,
        "state": cluster.state,
        "fenced": cluster.fenced,
        "fenced_reason": cluster.fenced_reason,
        "fenced_since_ms": cluster.fenced_since_ms,
    }


def partition_view(image: MetadataImage, p: PartitionImage) -> dict[str, Any]:
    cluster = image.clusters.get(p.cluster_id)
    leader = cluster.leaders.get((p.physical_topic, p.physical_partition)) if cluster else None
    return {
        "partition": p.partition,
        "cluster_id": p.cluster_id,
        "physical_topic": p.physical_topic,
        "physical_partition": p.physical_partition,
        "state": p.state,
        "leader": leader,
        "writable": is_writable(image, p),
    }


def topic_view(image: MetadataImage, topic: TopicImage) -> dict[str, Any]:
    """``partition_view`` of every partition, with each cluster looked up once (topics have up to 1M)."""
    no_leaders: Mapping[tuple[str, int], str] = {}
    per_cluster: dict[str, tuple[Mapping[tuple[str, int], str], bool]] = {}
    partitions = []
    # unpacked, not read by attribute: a quarter less time for a 1,000-partition topic (one per topic creation)
    for partition, cluster_id, physical_topic, physical_partition, state in topic.partitions:
        found = per_cluster.get(cluster_id)
        if found is None:
            cluster = image.clusters.get(cluster_id)
            found = per_cluster[cluster_id] = (
                (cluster.leaders, cluster.state == "active" and not cluster.fenced) if cluster else (no_leaders, False)
            )
        leaders, cluster_writable = found
        partitions.append({
            "partition": partition,
            "cluster_id": cluster_id,
            "physical_topic": physical_topic,
            "physical_partition": physical_partition,
            "state": state,
            "leader": leaders.get((physical_topic, physical_partition)) if leaders else None,
            "writable": cluster_writable and state == "writable",
        })  # fmt: skip
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "region": topic.region,
        "retention_ms": topic.retention_ms,
        "partitions": partitions,
        # "key_order": "none", or "strict" with its epoch, key map, seals and releases
        **key_order_view(image.key_orders, topic.name),
    }


def metadata_view(image: MetadataImage, topic: str | None = None) -> dict[str, Any]:
    """Merged metadata at ``image.offset``; with ``topic``, only that topic (and every cluster)."""
    topics = image.topics.values() if topic is None else [t for t in (image.topics.get(topic),) if t]
    return {
        "offset": image.offset,
        "clusters": [cluster_view(c) for c in sorted(image.clusters.values(), key=lambda c: c.cluster_id)],
        "topics": [topic_view(image, t) for t in sorted(topics, key=lambda t: t.name)],
    }
