"""Bearer-token access control of the HTTP API.

Three kinds of request:

- *open*: probes, metrics, the API docs and the dashboard's static files — never need a token;
- *admin*: every ``POST``/``PUT``/``DELETE`` that changes the federation or reports for an agent —
  need the admin token when one is configured (``--admin-token-file``);
- *read*: everything else, and consumer-group calls (``/v1/groups/…``; members of a group are readers) and
  transactional producers' calls (``/v1/transactions/…``; producers hold client tokens)
  — need the read or the admin token when a read token is configured (``--read-token-file``).

A missing or unknown token is 401, a read token on an admin request 403, both problem+json.

The check is ASGI middleware, not a FastAPI dependency: FastAPI reads and decodes a request's body before
any dependency runs, so a stranger's body would be read (and a malformed one answered 422, not 401), and
the hot path answers leader-only requests before FastAPI sees them.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from metadata_log.errors import Forbidden, KfedError, Unauthorized

from . import problems

OPEN_PATHS: Final = frozenset(
    {"/", "/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json"}
)
READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


class Need(Enum):
    OPEN = "open"
    READ = "read"
    ADMIN = "admin"


def need_of(method: str, path: str) -> Need:
    if path in OPEN_PATHS or path == "/ui" or path.startswith("/ui/"):
        return Need.OPEN
    if method in READ_METHODS or path.startswith(("/v1/groups/", "/v1/transactions/")):
        return Need.READ
    return Need.ADMIN


@dataclass(frozen=True, slots=True)
class Tokens:
    """The node's tokens; None means that kind of request is open to anyone who can reach the port."""

    admin: str | None = field(default=None, repr=False)
    read: str | None = field(default=None, repr=False)

    @property
    def enabled(self) -> bool:
        return self.admin is not None or self.read is not None

    def check(self, need: Need, authorization: str | None) -> None:
        """Raises ``Unauthorized`` or ``Forbidden`` unless ``authorization`` allows a ``need`` request."""
        required = {Need.OPEN: None, Need.READ: self.read, Need.ADMIN: self.admin}[need]
        if required is None:
            return
        token = _bearer(authorization)
        if token is None:
            raise Unauthorized("this request needs 'Authorization: Bearer <token>'")
        if _same(token, self.admin):
            return
        if need is Need.READ and _same(token, self.read):
            return
        if _same(token, self.read):
            raise Forbidden("the read token does not allow admin writes; use the admin token")
        raise Unauthorized("unknown token")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


class Authorize:
    """ASGI middleware: checks the token before routing, so nothing of a refused request is read."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            try:
                self.tokens.check(need_of(scope["method"], scope["path"]), authorization)
            except KfedError as e:
                await problems.kfed_error_response(e)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def document(app: FastAPI, tokens: Tokens) -> None:
    """Declare the bearer scheme in the OpenAPI schema (the Authorize button of /docs, and tools that
    generate requests from the schema) when this node requires tokens."""
    if not tokens.enabled:
        return
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": __doc__ or ""}
            }
            for path, operations in schema.get("paths", {}).items():
                for method, operation in operations.items():
                    if need_of(method.upper(), path) is not Need.OPEN:
                        operation["security"] = [{"bearer": []}]
                        responses = operation.setdefault("responses", {})
                        responses["401"] = {"description": "No or unknown token"}
                        responses["403"] = {"description": "The read token on an admin request"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
