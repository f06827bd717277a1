"""kfed's one error tree: every exception class of the product derives from ``KfedError``, and the HTTP
statuses are one table read both ways (the problem+json handler writes them, the client reads them)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from controller.problems import kfed_error_response
from metadata_client.client import ControllerClient
from metadata_client.retry import reply_error
from metadata_log.errors import (
    WIRE_ERRORS,
    InvalidRequest,
    KfedError,
    NotAController,
    Unavailable,
    class_for_status,
)

ROOT = Path(__file__).resolve().parents[2]


def product_packages() -> list[str]:
    """The top-level packages the distribution ships (pyproject's package list): a new one is checked too."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return sorted({name.split(".")[0].rstrip("*") for name in found["include"]})


def product_modules() -> Iterator[str]:
    for name in product_packages():
        package = importlib.import_module(name)
        yield name
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if not info.name.endswith(".__main__"):  # runs the command when imported
                yield info.name


def exception_classes(owner: object, module: str) -> Iterator[type[BaseException]]:
    """The exception classes ``module`` defines at its top level or inside its classes."""
    for value in vars(owner).values():
        if inspect.isclass(value) and value.__module__ == module:
            if issubclass(value, BaseException):
                yield value
            if value is not owner:
                yield from exception_classes(value, module)


def test_every_exception_class_of_the_product_derives_from_the_root() -> None:
    defined = {
        f"{module}.{cls.__qualname__}": cls
        for module in product_modules()
        for cls in exception_classes(importlib.import_module(module), module)
    }
    assert len(defined) >= 28, sorted(defined)  # the count when the tree was made one; more may come
    outside = sorted(name for name, cls in defined.items() if not issubclass(cls, KfedError))
    assert not outside, f"exception classes outside the KfedError tree: {outside}"


def test_each_package_draws_every_error_class_it_defines_in_its_face() -> None:
    """The error tree's drawing is shared out: the root module draws the core's classes, each package its own
    (its ``__init__.py`` docstring names every exception class its modules define)."""
    missing = {}
    for module in product_modules():
        package = module.split(".")[0]
        face = inspect.getdoc(importlib.import_module(package)) or ""
        for cls in exception_classes(importlib.import_module(module), module):
            if module != "metadata_log.errors" and cls.__name__ not in face:
                missing.setdefault(package, []).append(cls.__name__)
    assert not missing, f"exception classes not drawn in their package's face: {missing}"


def test_each_status_has_one_class_and_each_class_its_status() -> None:
    assert len({cls.status for cls in WIRE_ERRORS}) == len(WIRE_ERRORS)
    for cls in WIRE_ERRORS:
        assert class_for_status(cls.status) is cls
    assert class_for_status(418) is KfedError


def _reply(response: object, url: str = "http://127.0.0.1:1") -> httpx.Response:
    """The client's view of a server answer (a starlette ``Response``)."""
    return httpx.Response(
        response.status_code,  # type: ignore[attr-defined]
        headers=dict(response.headers),  # type: ignore[attr-defined]
        content=response.body,  # type: ignore[attr-defined]
        request=httpx.Request("GET", url + "/v1/x"),
    )


@pytest.mark.parametrize("cls", WIRE_ERRORS, ids=lambda cls: cls.__name__)
def test_the_client_reads_back_the_error_the_handler_wrote(cls: type[KfedError]) -> None:
    sent = InvalidRequest("topics.0", "bad name", limit=3) if cls is InvalidRequest else cls("no luck", offset=7)
    answer = kfed_error_response(sent)
    assert answer.status_code == cls.status
    got = reply_error("http://127.0.0.1:1", _reply(answer))
    assert type(got) is cls
    assert (got.detail, got.extra, got.retryable) == (sent.detail, sent.extra, cls.retryable)
    if isinstance(sent, InvalidRequest):
        assert isinstance(got, InvalidRequest) and got.field == "topics.0"
    if sent.retry_after_s is not None:
        assert answer.headers["retry-after"] == "1" and got.retry_after_s is not None


def test_an_error_about_the_node_itself_is_answered_as_a_crash() -> None:
    from metadata_log.codec import CodecError

    answer = kfed_error_response(CodecError("a detail that stays in the node's log"))
    body = orjson.loads(answer.body)
    assert answer.status_code == 500 and body["detail"] == "CodecError; see the node's log"


@pytest.mark.parametrize(
    ("status", "content_type", "retryable"),
    [(501, "text/html; charset=utf-8", False), (200, "text/html", False), (404, "", False), (502, "text/html", True)],
)
def test_a_reply_that_is_not_kfeds_is_named_not_quoted(status: int, content_type: str, retryable: bool) -> None:
    page = b"<html><body><h1>501 Not Implemented</h1>nginx</body></html>"
    headers = {"content-type": content_type} if content_type else {}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, content=page)

    client = ControllerClient("http://127.0.0.1:8001", deadline_s=0.2)
    client._http = httpx.Client(transport=httpx.MockTransport(answer))
    with client, pytest.raises(NotAController) as caught:
        client.get("/v1/metadata")
    media = content_type.split(";")[0] or "no content type"
    assert str(caught.value) == f"http://127.0.0.1:8001: not a kfed controller (HTTP {status} {media})"
    assert caught.value.status == status and caught.value.retryable is retryable


def test_errors_survive_pickling_with_their_attributes() -> None:
    from sdk.errors import UnknownTopic
    from spark_pipeline.options import SourceOptionError

    for error in (
        InvalidRequest("name", "too long"),
        Unavailable("no leader", retry_after_s=0.2, applied_offset=3),
        UnknownTopic("T", 5),
        SourceOptionError("subscribe", "is required"),
        NotAController("http://h:1", 501, "text/html"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
