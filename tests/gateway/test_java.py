"""The Java client (org.apache.kafka:kafka-clients from Maven Central, default settings: an idempotent
producer, an eager-or-cooperative consumer) through the gateway."""

from __future__ import annotations

import pytest

from deploy.launcher import LocalFederation

from .clients import java_classpath, java_member, java_produce
from .conftest import Gateways
from .scenario import group_scenario

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def classpath() -> str:
    return java_classpath()


def test_java_client_consumes_in_a_group_of_two_exactly_once_and_survives_a_gateway_killed_mid_stream(
    fed: LocalFederation, gateways: Gateways, classpath: str
) -> None:
    group_scenario(fed, gateways, java_produce(classpath), java_member(classpath))


def test_java_consumers_that_offer_only_cooperative_sticky_keep_partitions_across_rebalances(
    fed: LocalFederation, gateways: Gateways, classpath: str
) -> None:
    """Members offering only the cooperative protocol keep what they own when they rejoin; the gateway hands a
    partition to one only after the other gave it up (its subscription no longer lists it as owned)."""
    cooperative = "partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
    group_scenario(fed, gateways, java_produce(classpath), java_member(classpath, cooperative))
