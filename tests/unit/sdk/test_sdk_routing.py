"""The producer's C router for key-less messages (sdk/_speedups.c): what it sends itself, what it leaves to
``FederatedProducer.produce``'s Python, without Kafka."""

from __future__ import annotations

import sys
from itertools import cycle
from typing import Any, NamedTuple

import pytest

speedups = pytest.importorskip("sdk._speedups", reason="the C module is not built")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        return "sent"


class Router(NamedTuple):
    routes: dict[str, Any]
    send: Recorder  # both partitions' physical produce()
    fallback: Recorder  # FederatedProducer.produce's Python
    produce: Any


@pytest.fixture
def router() -> Router:
    send, fallback = Recorder(), Recorder()
    routes = {"t": cycle([(send, "phys-a", 0, "report-a", "target-a"), (send, "phys-b", 3, "report-b", "target-b")])}
    return Router(routes, send, fallback, speedups.KeylessRouter(routes, fallback))


def test_key_less_messages_without_extras_go_round_robin_to_the_physical_partitions(router: Router) -> None:
    send, fallback, produce = router[1:]
    assert produce("t", b"1") == "sent"  # what send returned
    produce("t", value=b"2")
    produce("t", b"3", None, None, None, None, 0)
    produce(topic="t", value=b"4", timestamp=0, key=None)
    produce("t")
    assert send.calls == [
        (("phys-a", b"1", None, 0, "report-a"), {}),
        (("phys-b", b"2", None, 3, "report-b"), {}),
        (("phys-a", b"3", None, 0, "report-a"), {}),
        (("phys-b", b"4", None, 3, "report-b"), {}),
        (("phys-a", None, None, 0, "report-a"), {}),
    ]
    assert fallback.calls == []


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("t", b"v", b"key"), {}),  # keyed
        (("t", b"v"), {"partition": 2}),  # pinned
        (("t", b"v"), {"headers": [("h", b"1")]}),
        (("t", b"v"), {"on_delivery": print}),
        (("t", b"v"), {"timestamp": 1_700_000_000_000}),
        (("t", b"v"), {"timestamp": 1 << 80}),
        (("t", b"v"), {"colour": "red"}),  # unknown: produce raises TypeError
        (("t",), {"topic": "t"}),  # given twice
        (("u", b"v"), {}),  # no route yet (or no writable partition): produce makes it or raises
        ((b"t", b"v"), {}),  # not a str
        ((), {}),
        (("t", b"v", None, None, None, None, 0, "extra"), {}),
    ],
)
def test_anything_else_goes_to_the_fallback_with_the_arguments_as_given(router: Router, args: Any, kwargs: Any) -> None:
    send, fallback, produce = router[1:]
    assert produce(*args, **kwargs) == "sent"
    assert (send.calls, fallback.calls) == ([], [(args, kwargs)])


def test_routes_are_read_at_each_call(router: Router) -> None:
    routes, send, fallback, produce = router
    routes.clear()  # what FederatedProducer does when metadata or mutes change
    produce("t", b"1")
    routes["t"] = cycle([(send, "phys-c", 1, "report-c", "target-c")])
    produce("t", b"2")
    assert fallback.calls == [(("t", b"1"), {})] and send.calls == [(("phys-c", b"2", None, 1, "report-c"), {})]


def test_errors_of_the_send_and_of_a_bad_route_reach_the_caller(router: Router) -> None:
    routes, _, fallback, produce = router

    def full(*args: Any) -> None:
        raise BufferError("Local: Queue full")

    routes["t"] = cycle([(full, "phys-a", 0, "report-a", "target-a")])
    with pytest.raises(BufferError, match="Queue full"):
        produce("t", b"v")
    routes["t"] = cycle([("too short",)])
    with pytest.raises(TypeError, match="a route yields"):
        produce("t", b"v")
    routes["t"] = iter([])
    produce("t", b"v")  # an exhausted iterator: left to the fallback
    assert fallback.calls == [(("t", b"v"), {})]
    with pytest.raises(TypeError, match="fallback must be callable"):
        speedups.KeylessRouter({}, None)


def test_the_router_keeps_reference_counts_exact() -> None:
    sent = [0]

    def send(*args: Any) -> None:  # keeps nothing
        sent[0] += 1

    value, topic = bytes(100), "-".join(("phys", "a"))  # made at run time: counted
    target = (send, topic, 0, "report", "target")
    routes = {"t": cycle([target])}
    produce = speedups.KeylessRouter(routes, Recorder())
    before = sys.getrefcount(value), sys.getrefcount(topic), sys.getrefcount(target)
    for _ in range(1_000):
        produce("t", value)
    assert sent == [1_000] and (sys.getrefcount(value), sys.getrefcount(topic), sys.getrefcount(target)) == before
