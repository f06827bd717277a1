"""kcat (librdkafka), unmodified, through the gateway."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import pytest

from deploy.launcher import LocalFederation

from .clients import KcatMember, kcat_produce
from .conftest import TOPIC, Gateways, physical_messages
from .scenario import group_scenario

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make kcat)"),
]


def kcat(*args: str, stdin: str | None = None, timeout_s: float = 60) -> str:
    """kcat's output; fails the test on a non-zero exit."""
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def test_kcat_lists_the_federation_as_one_cluster_of_the_live_gateways(gateway: str, gateways: Gateways) -> None:
    second = gateways.start()
    listing = kcat("-b", gateway, "-L", "-m", "10")
    brokers = set(re.findall(r"broker (\d+) at (\S+)", listing))
    assert {address for _, address in brokers} == {gateway, second}
    assert f'topic "{TOPIC}" with 8 partitions' in listing
    leaders = re.findall(r"partition (\d+), leader (\d+)", listing)
    assert sorted(int(p) for p, _ in leaders) == list(range(8))
    assert {leader for _, leader in leaders} == {node for node, _ in brokers}, "leaders spread over both"
    gateways.kill(second)
    gateways.wait_live({int(gateway.rsplit(":", 1)[1])})
    assert "1 brokers" in kcat("-b", gateway, "-L", "-m", "10")


def test_kcat_produces_keyed_and_keyless_messages_onto_both_clusters_and_reads_them_back(
    gateway: str, fed: LocalFederation
) -> None:
    run = uuid.uuid4().hex[:8]
    keyed = [f"key-{i % 17}:{run}-keyed-{i}" for i in range(200)]
    keyless = [f"{run}-keyless-{i}" for i in range(200)]
    kcat("-b", gateway, "-P", "-t", TOPIC, "-K:", stdin="\n".join(keyed) + "\n")
    kcat("-b", gateway, "-P", "-t", TOPIC, stdin="\n".join(keyless) + "\n")
    expected = {line.split(":", 1)[1] for line in keyed} | set(keyless)

    out = kcat("-b", gateway, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %k %s\n")
    rows = [line.split(" ", 2) for line in out.splitlines() if run in line]
    assert sorted(value for _, _, value in rows) == sorted(expected), "every message read back once"
    partitions_of_key: dict[str, set[str]] = {}
    for partition, key, _ in rows:
        if key:
            partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values()), "a key stays in one partition"

    landed = {cluster: {v.decode() for v in values} & expected for cluster, values in physical_messages(fed).items()}
    assert landed["c1"] and landed["c2"], "messages on both physical clusters"
    assert landed["c1"] | landed["c2"] == expected and not landed["c1"] & landed["c2"]


def test_kcat_consumes_in_a_group_of_two_exactly_once_and_survives_a_gateway_killed_mid_stream(
    fed: LocalFederation, gateways: Gateways
) -> None:
    group_scenario(fed, gateways, kcat_produce, KcatMember)
