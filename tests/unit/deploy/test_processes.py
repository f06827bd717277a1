"""Free ports: distinct, below the kernel's ephemeral range, and, in a run split over pytest-xdist workers,
each worker's from its own share (two workers never pick the same port before either binds it)."""

from __future__ import annotations

import pytest

from deploy import processes


def ephemeral_low() -> int:
    return int(processes.EPHEMERAL_RANGE_FILE.read_text().split()[0])


def test_free_ports_are_distinct_and_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    ports = processes.free_ports(20)
    assert len(set(ports)) == 20
    assert all(ephemeral_low() - processes.PORTS_BELOW_EPHEMERAL <= p < ephemeral_low() for p in ports)


def test_each_xdist_worker_picks_only_its_share_of_the_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    first = ephemeral_low() - processes.PORTS_BELOW_EPHEMERAL
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        assert {(p - first) % 3 for p in processes.free_ports(30)} == {index}


def test_a_worker_name_that_is_not_xdists_leaves_every_port_to_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "master")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    assert len({p % 3 for p in processes.free_ports(60)}) > 1


def test_a_port_handed_out_is_not_handed_out_again_though_nothing_bound_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker's JVM binds its ports seconds after they were picked, and a broker a test killed is started again
    on the same ones: meanwhile they look free, and must not go to another server of this process."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(processes, "PORTS_BELOW_EPHEMERAL", 400)
    monkeypatch.setattr(processes, "_handed_out", set())
    first = processes.free_ports(100)
    assert not set(first) & set(processes.free_ports(100)), "a port picked and not yet bound was picked again"
    processes.free_ports(150)  # most of the 400 handed out: it starts over rather than run dry
    assert len(processes.free_ports(50)) == 50
