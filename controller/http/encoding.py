"""How answers are encoded: JSON by default, msgpack when the request's ``Accept`` asks for it."""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.requests import Request
from starlette.responses import Response

from metadata_log.codec import pack

MSGPACK: Final = "application/msgpack"
JSON: Final = "application/json"


def wants_msgpack(request: Request) -> bool:
    return MSGPACK in request.headers.get("accept", "")


def encode(body: Any, msgpack: bool, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    if msgpack:
        return Response(pack(body), status_code=status, media_type=MSGPACK, headers=headers)
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


def respond(request: Request, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` in the encoding the request asks for."""
    return encode(body, wants_msgpack(request), status, headers)
