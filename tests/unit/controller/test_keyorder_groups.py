"""The group coordinator's part of strict key order (docs/KEY_ORDER.md decisions 4 and 5): releases
from the committed offsets members report, give-ups only of parents that cannot be read to their seal, and
releases answered to members only once the parent's owner has seen them."""

from __future__ import annotations

from controller.groups import GroupCoordinator
from metadata_log import commands
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.image.key_orders import strict_history
from metadata_log.records import ClusterFenced, ClusterRegistered, KeyOrderSealed, KeyRangeReleased, Record

NOW = 100.0


def strict_topic_after_shrink() -> MetadataImage:
    """S strict over P0-P3 (P0, P1 on c1; P2, P3 on c2), then P3 shrunk: epoch 2 moved P3's keys away."""
    image = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1"), ClusterRegistered("c2", "r1", "h:2")])
    image = apply(image, commands.create_topic(image, "S", "r1", 2, "id", key_order="strict").records)
    shrunk = commands.with_epochs(image, commands.shrink_partitions(image, "S", [3]), "shrink")
    return apply(image, shrunk.records)


def releases(
    image: MetadataImage, committed: list[tuple[str, int, int]], given_up: list[tuple[str, int, int]]
) -> list[Record]:
    return list(commands.heartbeat_releases(image, "g", ["S"], committed, given_up).records)


def member(coordinator: GroupCoordinator, owned: list[tuple[str, int]], offset: int) -> str:
    return coordinator.heartbeat("g", None, ["S"], owned, 10_000, NOW, metadata_offset=offset)


def test_a_parent_is_released_once_the_group_committed_it_up_to_its_seal() -> None:
    image = strict_topic_after_shrink()
    assert releases(image, [("S", 3, 50)], []) == [], "no seal recorded yet"
    image = apply(image, [KeyOrderSealed("S", 2, 3, 40)])
    assert releases(image, [("S", 3, 39)], []) == [], "committed below the seal"
    records = releases(image, [("S", 3, 40)], [])
    assert records == [KeyRangeReleased("g", "S", 2, 3, False, "")]
    image = apply(image, records)
    assert releases(image, [("S", 3, 40)], []) == [], "released once"


def test_a_group_gives_up_only_a_parent_it_cannot_read_to_its_seal() -> None:
    image = strict_topic_after_shrink()
    assert releases(image, [], [("S", 2, 3)]) == [], "c2 is up: read P3"
    image = apply(image, [ClusterFenced("c2", "broker died", 1)])
    records: list[Record] = releases(image, [], [("S", 2, 3)])
    assert len(records) == 1 and isinstance(records[0], KeyRangeReleased) and records[0].broken
    image = apply(image, records)
    history = strict_history(image.key_orders, "S")
    assert history is not None and history.releases[("g", 2, 3)].broken


def test_members_act_on_a_release_only_once_the_parents_owner_has_seen_it() -> None:
    image = apply(strict_topic_after_shrink(), [KeyOrderSealed("S", 2, 3, 40)])
    coordinator = GroupCoordinator()
    owner = member(coordinator, [("S", 3)], image.offset)
    other = member(coordinator, [("S", 0), ("S", 1)], image.offset)
    image = apply(image, releases(image, [("S", 3, 40)], []))
    assert coordinator.reply("g", other, image)["key_releases"] == {"S": []}, "P3's owner has not seen it"
    member_again = coordinator.heartbeat("g", owner, ["S"], [("S", 3)], 10_000, NOW, metadata_offset=image.offset)
    assert member_again == owner
    assert coordinator.reply("g", other, image)["key_releases"] == {"S": [[2, 3]]}
    coordinator.leave("g", owner)
    assert coordinator.reply("g", other, image)["key_releases"] == {"S": [[2, 3]]}, "nobody owns P3: act on it"
