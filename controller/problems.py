"""The one place that turns errors into HTTP answers: RFC 9457 problem+json, with the status each error
class carries (``metadata_log/errors.py``)."""

from __future__ import annotations

import logging
import math
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from metadata_log.errors import InvalidRequest, KfedError

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def kfed_error_response(error: KfedError) -> Response:
    """The answer to ``error``: its class's status and title (``metadata_log/errors.py``), its detail and
    extension members, and the headers its status calls for."""
    if error.status == 500:  # about this node's own state or set-up, not the request: a crash, logged
        log.error("unhandled %s: %s", type(error).__name__, error.detail, exc_info=error)
        return internal_error(error)
    headers = None
    if error.retry_after_s is not None:
        headers = {"Retry-After": str(max(1, math.ceil(error.retry_after_s)))}
    elif error.status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="kfed"'}
    return problem(error.status, error.title, error.detail, headers, **error.extra)


def internal_error(error: Exception) -> Response:
    """The answer to a crash: its type only (the node's log has the rest)."""
    return problem(500, "Internal error", f"{type(error).__name__}; see the node's log")


def install(app: FastAPI) -> None:
    @app.exception_handler(KfedError)
    async def _kfed(_: Request, error: KfedError) -> Response:
        return kfed_error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, error: RequestValidationError) -> Response:
        errors = error.errors()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        field = ".".join(loc) or "body"
        detail = f"{field}: {first.get('msg', 'invalid')}"
        return problem(
            InvalidRequest.status,
            InvalidRequest.title,
            detail,
            field=field,
            errors=[
                {"field": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg")} for e in errors[:20]
            ],
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> Response:
        if isinstance(error.__cause__, KfedError):  # e.g. the body limit, hit while FastAPI read the body
            return kfed_error_response(error.__cause__)
        title = {404: "Not found", 405: "Method not allowed"}.get(error.status_code, "Error")
        return problem(error.status_code, title, str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return internal_error(error)
