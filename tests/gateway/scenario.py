"""The scenario every client runs through the gateway: produce, consume in a group of two, lose a gateway."""

from __future__ import annotations

import threading
import uuid

from deploy.launcher import LocalFederation
from tests.waiting import wait_until

from .clients import Member, MemberFactory, Producer
from .conftest import Gateways, physical_messages

MESSAGES = 3000


def received(members: list[Member], prefix: str) -> list[str]:
    return [v for m in members for v in list(m.values) if v.startswith(prefix)]


def group_scenario(fed: LocalFederation, gateways: Gateways, produce: Producer, member: MemberFactory) -> None:
    """Two fresh gateways. A group of two members (the second joins while the first consumes) reads every
    message produced, keyed and key-less, exactly once. Then the group's coordinator gateway is killed
    while the producer sends more: the client carries on through the other one and nothing acknowledged
    is lost (at least once). Every message is on one of the two physical clusters, and both have some."""
    first, second = gateways.start(), gateways.start()
    bootstrap = f"{first},{second}"
    run = uuid.uuid4().hex[:8]
    group = f"group-{run}"
    members = [member("a", bootstrap, group, run), member("b", bootstrap, group, run)]
    members[0].start()
    try:
        wait_until(members[0].assigned, 60, "the first member has partitions")
        members[1].start()
        acked = produce(bootstrap, f"{run}.1a", MESSAGES // 2)  # while the second joins
        wait_until(members[1].assigned, 60, "the second member has partitions")
        acked |= produce(bootstrap, f"{run}.1b", MESSAGES // 2)  # so that both have some to read
        assert len(acked) == MESSAGES, f"{MESSAGES - len(acked)} messages not acknowledged"
        wait_until(lambda: set(received(members, f"{run}.1")) >= acked, 90, "every message consumed")
        got = received(members, f"{run}.1")
        assert sorted(got) == sorted(acked), f"{len(got) - len(set(got))} consumed twice"
        assert all(m.values for m in members), "both members consumed"

        phase_two: set[str] = set()
        producing = threading.Thread(target=lambda: phase_two.update(produce(bootstrap, f"{run}.2", MESSAGES)))
        producing.start()
        wait_until(lambda: len(received(members, f"{run}.2")) > MESSAGES // 5, 60, "the second stream flows")
        gateways.kill(gateways.coordinator_of(group, among=[first, second]))
        producing.join(240)
        assert len(phase_two) == MESSAGES, f"{MESSAGES - len(phase_two)} not acknowledged after the gateway died"
        wait_until(lambda: set(received(members, f"{run}.2")) >= phase_two, 120, "nothing lost after the kill")
    finally:
        for m in members:
            m.stop()
    landed = {cluster: {v.decode() for v in values if v.startswith(run.encode())}
              for cluster, values in physical_messages(fed).items()}  # fmt: skip
    assert landed["c1"] and landed["c2"], "messages on both physical clusters"
    assert landed["c1"] | landed["c2"] >= acked | phase_two
