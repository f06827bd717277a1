"""The one place that turns errors into HTTP: RFC 9457 problem+json."""

from __future__ import annotations

import logging
import math
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from metadata_log.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidRequest,
    KfedError,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

_STATUS: dict[type[KfedError], int] = {
    InvalidRequest: 422,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    PayloadTooLarge: 413,
    TooManyRequests: 429,
    Unavailable: 503,
    OutcomeUnknown: 504,
}


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def kfed_error_response(error: KfedError) -> Response:
    status = next((s for cls, s in _STATUS.items() if isinstance(error, cls)), 500)
    headers = None
    if isinstance(error, Unavailable | TooManyRequests):
        headers = {"Retry-After": str(max(1, math.ceil(error.retry_after_s)))}
    elif isinstance(error, Unauthorized):
        headers = {"WWW-Authenticate": 'Bearer realm="kfed"'}
    return problem(status, error.title, error.detail, headers, **error.extra)


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
            422,
            "Invalid request",
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
        return problem(500, "Internal error", f"{type(error).__name__}; see the node's log")
