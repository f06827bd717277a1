"""The hot path's route matching: it takes only what FastAPI would route to the same endpoint."""

from __future__ import annotations

from controller.http.bodies import ChangeState
from controller.http.routing import LeaderRoute
from controller.http.topics import change_partition_state

ROUTE = LeaderRoute("PUT", "/v1/topics/{name}/partitions/{partition}/state", ChangeState, change_partition_state,
                    int_params=frozenset({"partition"}))  # fmt: skip


def test_a_matching_request_gets_its_typed_path_parameters() -> None:
    assert ROUTE.match("PUT", "/v1/topics/U_TopicA/partitions/7/state") == {"name": "U_TopicA", "partition": 7}
    assert ROUTE.match("PUT", "/v1/topics/a b/partitions/007/state") == {"name": "a b", "partition": 7}


def test_anything_else_is_left_to_fastapi() -> None:
    for method, path in [
        ("POST", "/v1/topics/t/partitions/7/state"),  # another method
        ("PUT", "/v1/topics/t/partitions/7"),  # shorter
        ("PUT", "/v1/topics/t/partitions/7/state/x"),  # longer
        ("PUT", "/v1/topics//partitions/7/state"),  # empty parameter
        ("PUT", "/v1/topics/t/partitions/-1/state"),  # not a plain non-negative integer: FastAPI's answer
        ("PUT", "/v1/topics/t/partitions/٣/state"),  # a non-ASCII digit
        ("PUT", "/v1/topics/t/partition/7/state"),  # another literal
    ]:
        assert ROUTE.match(method, path) is None, (method, path)
