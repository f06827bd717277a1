"""The group commands: a coordinator claimed once, a generation started only when the assignment changes,
round-robin per topic over its subscribers, and a group name checked like every other name."""

from __future__ import annotations

import pytest

from metadata_log import commands
from metadata_log.errors import InvalidRequest
from metadata_log.image import apply
from metadata_log.records import GroupCoordinatorAssigned, GroupGenerationStarted, GroupMember
from tests.unit.samples import two_clusters


def test_a_coordinator_is_claimed_once_per_node() -> None:
    image = two_clusters()
    claimed = commands.claim_group(image, "g", 1)
    assert claimed.records == (GroupCoordinatorAssigned("g", 1),)
    image = apply(image, claimed.records)
    assert commands.claim_group(image, "g", 1).records == ()
    assert commands.claim_group(image, "g", 2).records == (GroupCoordinatorAssigned("g", 2),)


def test_a_generation_starts_only_when_the_assignment_changes() -> None:
    image = two_clusters()  # topic A: partitions 0-2
    first = commands.start_generation(image, "g", {"m2": ("A",), "m1": ("A", "missing")})
    expected = (GroupMember("m1", (("A", 0), ("A", 2))), GroupMember("m2", (("A", 1),)))
    assert first.records == (GroupGenerationStarted("g", 1, expected),)
    image = apply(image, first.records)
    assert commands.start_generation(image, "g", {"m1": ("A",), "m2": ("A",)}).records == ()
    (second,) = commands.start_generation(image, "g", {"m1": ("A",)}).records
    assert second == GroupGenerationStarted("g", 2, (GroupMember("m1", (("A", 0), ("A", 1), ("A", 2))),))


def test_a_bad_group_name_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as refused:
        commands.start_generation(two_clusters(), "no spaces", {})
    assert refused.value.field == "group"
