"""confluent-kafka (librdkafka) as applications use it, without kfed's SDK, through the gateway."""

from __future__ import annotations

import pytest

from deploy.launcher import LocalFederation

from .clients import ConfluentMember, confluent_produce
from .conftest import Gateways
from .scenario import group_scenario

pytestmark = pytest.mark.slow


def test_confluent_kafka_consumes_in_a_group_of_two_exactly_once_and_survives_a_gateway_killed_mid_stream(
    fed: LocalFederation, gateways: Gateways
) -> None:
    group_scenario(fed, gateways, confluent_produce, ConfluentMember)
