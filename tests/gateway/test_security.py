"""TLS and SASL/PLAIN on the gateway's listener, with kfed's tokens as passwords; topic admin through Kafka's own
CreateTopics and DeleteTopics, for the admin only."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.launcher import LocalFederation
from metadata_client.access import write_secret
from tests.integration.test_security import _certificates
from tests.waiting import wait_until

from .conftest import Gateways

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def secured(fed: LocalFederation, gateways: Gateways, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A gateway with SASL/PLAIN over TLS: its address, the CA, the admin and a client token."""
    where = tmp_path_factory.mktemp("tls")
    cert, key, ca = _certificates(where)
    client_token = write_secret(where / "client.token")
    address = gateways.start("--sasl", "--client-token-file", str(where / "client.token"), "--tls-cert", str(cert),
                             "--tls-key", str(key))  # fmt: skip
    assert fed.quorum.admin_token is not None
    return {"address": address, "ca": str(ca), "admin": fed.quorum.admin_token, "client": client_token}


def config(secured: dict[str, Any], password: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": secured["address"], "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
            "sasl.username": "someone", "sasl.password": password, "ssl.ca.location": secured["ca"],
            "log_level": 3, **more}  # fmt: skip


def topics_in_kfed(fed: LocalFederation) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in fed.metadata()["topics"]}


def test_the_admin_creates_and_deletes_a_logical_topic_through_kafkas_admin_api(
    fed: LocalFederation, secured: dict[str, Any]
) -> None:
    admin = AdminClient(config(secured, secured["admin"]))
    name = f"G_{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(30)
    assert topics_in_kfed(fed)[name] == 4, "two logical partitions on each of the two clusters"
    placement = {p["cluster_id"] for p in fed.metadata(topic=name)["topics"][0]["partitions"]}
    assert placement == {"c1", "c2"}

    with pytest.raises(KafkaException) as uneven:
        admin.create_topics([NewTopic(f"{name}_odd", 3, 1)])[f"{name}_odd"].result(30)
    assert uneven.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert "multiple of the 2 active clusters" in uneven.value.args[0].str()
    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic(name, 4, 1)])[name].result(30)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.delete_topics([name])[name].result(30)
    wait_until(lambda: name not in topics_in_kfed(fed), 30, "the topic deleted in kfed")


def test_a_client_token_produces_and_consumes_but_may_not_create_topics(
    fed: LocalFederation, secured: dict[str, Any]
) -> None:
    admin = AdminClient(config(secured, secured["client"]))
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("G_not_allowed", 2, 1)])["G_not_allowed"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "G_not_allowed" not in topics_in_kfed(fed)

    value = uuid.uuid4().hex.encode()
    producer = Producer(config(secured, secured["client"]))
    producer.produce("U_TopicA", value, partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer(config(secured, secured["client"], **{"group.id": "sasl-reader"}))
    consumer.assign([TopicPartition("U_TopicA", 1, 0)])
    deadline = time.monotonic() + 30
    found = False
    while not found and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        found = m is not None and not m.error() and m.value() == value
    consumer.close()
    assert found


def test_a_wrong_password_or_no_sasl_gets_nothing(secured: dict[str, Any]) -> None:
    for cfg in (config(secured, "not-a-token-of-this-federation"),
                {"bootstrap.servers": secured["address"], "security.protocol": "SSL",
                 "ssl.ca.location": secured["ca"], "log_level": 0}):  # fmt: skip
        admin = AdminClient(cfg)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)


def test_without_sasl_nobody_may_create_topics(gateway: str, fed: LocalFederation) -> None:
    admin = AdminClient({"bootstrap.servers": gateway, "log_level": 3})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("G_open", 2, 1)])["G_open"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "SASL/PLAIN" in refused.value.args[0].str()
