"""What a batch changed, as typed sets a publisher reads instead of records (Kafka's ``TopicsDelta.createdTopicIds()``,
``deletedTopicIds()``, ``changedTopics()`` and ``ClusterDelta``'s changed brokers).

Two steps, so that replay pays almost nothing. While it replays a batch, the delta notes which names it touched
(``Touched``): a set insert per topic created or deleted, per partition state set and per cluster record, and
nothing per partition added or per leader reported (the parts already keep those topics and clusters apart).
``Touched.settle`` then compares only those names in the image before and the image after, giving the exact
``MetadataChanges``: a name touched to no effect (a partition set read-only and writable again) is not in them.

``changes_between`` compares two whole images, for an image loaded whole (a snapshot) where no replay took place.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from .cluster import ClusterImage
from .common import evolve
from .metadata import MetadataImage
from .topics import TopicImage

_NONE: Final[frozenset[str]] = frozenset()


@dataclass(frozen=True, slots=True)
class MetadataChanges:
    """What differs between two images, by name. Topics are told apart by ``topic_id``: a topic deleted and
    created again under its name is in ``topics_deleted`` (the old one) and ``topics_created`` (the new one).

    - ``topics_created``: topics of the new image that the old one did not have.
    - ``topics_deleted``: topics of the old image that the new one does not have.
    - ``topics_changed``: topics of both whose partitions differ (partitions added, or a partition's state).
    - ``partition_states_changed``: (topic, partition) of both images whose state differs.
    - ``clusters_changed``: clusters registered, or whose state, fencing or bootstrap servers differ.
    - ``leaders_changed``: clusters whose reported partition leaders differ (a new cluster: none reported).
    """

    topics_created: frozenset[str] = _NONE
    topics_deleted: frozenset[str] = _NONE
    topics_changed: frozenset[str] = _NONE
    partition_states_changed: frozenset[tuple[str, int]] = frozenset()
    clusters_changed: frozenset[str] = _NONE
    leaders_changed: frozenset[str] = _NONE


NO_CHANGES: Final = MetadataChanges()
"""The changes of a batch that changed neither topics nor clusters."""


@dataclass(frozen=True, slots=True)
class Touched:
    """The names a batch's replay touched: every name whose topic or cluster may differ after it, and maybe some
    that do not. ``topics``: topics created or deleted (compared whole); ``partitions``: per topic whose
    partitions were added or had a state set, the partitions whose state was set; ``clusters``: clusters a
    cluster record replayed; ``leaders``: clusters whose leaders were reported."""

    topics: Collection[str] = _NONE
    partitions: Mapping[str, Collection[int]] = field(default_factory=dict)
    clusters: Collection[str] = _NONE
    leaders: Collection[str] = _NONE

    @staticmethod
    def union(batches: Sequence[Touched]) -> Touched:
        """The names touched by consecutive ``batches``: settled from the first's base to the last's image, the
        changes of all of them as one batch."""
        if len(batches) == 1:
            return batches[0]
        topics: set[str] = set()
        partitions: dict[str, set[int]] = {}
        clusters: set[str] = set()
        leaders: set[str] = set()
        for batch in batches:
            topics.update(batch.topics)
            for name, indices in batch.partitions.items():
                partitions.setdefault(name, set()).update(indices)
            clusters.update(batch.clusters)
            leaders.update(batch.leaders)
        return Touched(topics, partitions, clusters, leaders)

    def settle(self, base: MetadataImage, image: MetadataImage) -> MetadataChanges:
        """The exact changes from ``base`` to ``image``, given that nothing outside these names differs: a
        comparison of the touched names only."""
        created, deleted, changed, states = _topic_changes(base.topics, image.topics, self.topics, self.partitions)
        clusters, leaders = _cluster_changes(base.clusters, image.clusters, self.clusters, self.leaders)
        if not (created or deleted or changed or clusters or leaders):
            return NO_CHANGES
        return MetadataChanges(created, deleted, changed, states, clusters, leaders)


def changes_between(base: MetadataImage, image: MetadataImage) -> MetadataChanges:
    """The changes from ``base`` to ``image`` found by comparing every topic and cluster of both (an image
    loaded whole: no replay noted what it touched)."""
    clusters = {*base.clusters, *image.clusters}
    return Touched({*base.topics, *image.topics}, {}, clusters, clusters).settle(base, image)


def _topic_changes(
    before: Mapping[str, TopicImage],
    after: Mapping[str, TopicImage],
    whole: Collection[str],
    partitions: Mapping[str, Collection[int]],
) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[tuple[str, int]]]:
    """(created, deleted, changed, partition states changed) among the topics named in ``whole`` (compared
    whole) or in ``partitions`` (where only the partitions named may have changed state, and partitions added)."""
    created: list[str] = []
    deleted: list[str] = []
    changed: list[str] = []
    states: list[tuple[str, int]] = []
    for name in {*whole, *partitions}:
        old, new = before.get(name), after.get(name)
        if old is new:
            continue
        if old is None or new is None or old.topic_id != new.topic_id:
            if old is not None:
                deleted.append(name)
            if new is not None:
                created.append(name)
            continue
        differ = old.partitions.states_differ(new.partitions, None if name in whole else list(partitions[name]))
        moved = [(name, i) for i in differ]
        states += moved
        # a topic replayed whole may differ anywhere; one that was not, only in its partitions' count and states
        if moved or len(old.partitions) != len(new.partitions) or (name in whole and old != new):
            changed.append(name)
    return frozenset(created), frozenset(deleted), frozenset(changed), frozenset(states)


def _cluster_changes(
    before: Mapping[str, ClusterImage],
    after: Mapping[str, ClusterImage],
    clusters: Collection[str],
    leaders: Collection[str],
) -> tuple[frozenset[str], frozenset[str]]:
    """(clusters changed, leaders changed) among the clusters named: the first compared but for their leaders,
    the second by their leaders only (a dict comparison only when both hold as many leaders)."""
    changed = []
    for cluster_id in clusters:
        old, new = before.get(cluster_id), after.get(cluster_id)
        if old is not new and (old is None or new is None or evolve(new, leaders=old.leaders) != old):
            changed.append(cluster_id)
    moved = []
    for cluster_id in leaders:
        old, new = before.get(cluster_id), after.get(cluster_id)
        old_leaders = old.leaders if old is not None else {}
        new_leaders = new.leaders if new is not None else {}
        if old_leaders is not new_leaders and (len(old_leaders) != len(new_leaders) or old_leaders != new_leaders):
            moved.append(cluster_id)
    return frozenset(changed), frozenset(moved)
