"""The one error tree of kfed. Only the HTTP edge maps these to statuses (see ``controller/problems.py``)."""

from __future__ import annotations

from typing import Any


class KfedError(Exception):
    """Base of every error kfed reports to a caller. ``extra`` becomes problem+json extension members."""

    title = "Error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class InvalidRequest(KfedError):
    """Bad input; ``field`` names the offending field (dotted path for nested ones)."""

    title = "Invalid request"

    def __init__(self, field: str, detail: str, **extra: Any) -> None:
        super().__init__(detail, field=field, **extra)
        self.field = field


class Unauthorized(KfedError):
    """No credentials, or a token this node does not know (401)."""

    title = "Unauthorized"


class Forbidden(KfedError):
    """A known token that does not allow this request, e.g. the read token on an admin write (403)."""

    title = "Forbidden"


class NotFound(KfedError):
    title = "Not found"


class Conflict(KfedError):
    """The request is valid but does not fit the current metadata (or lost a race to another write)."""

    title = "Conflict"


class Gone(KfedError):
    """The requested offsets are below the retention window; read the snapshot instead."""

    title = "Offset below the retention window"


class Unavailable(KfedError):
    """No leader right now (or the node is not ready); retry after ``retry_after_s``."""

    title = "Service unavailable"

    def __init__(self, detail: str, retry_after_s: float = 1.0, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after_s = retry_after_s


class TooManyRequests(KfedError):
    """A per-client limit was reached (e.g. open log streams); retry after ``retry_after_s``."""

    title = "Too many requests"

    def __init__(self, detail: str, retry_after_s: float = 1.0, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after_s = retry_after_s


class OutcomeUnknown(KfedError):
    """The write may or may not have committed; retrying with the same Idempotency-Key is safe."""

    title = "Outcome unknown"


class PayloadTooLarge(KfedError):
    title = "Payload too large"
