"""The one error tree of kfed: every exception class kfed defines derives from ``KfedError``.

Each class carries what the HTTP edge needs, as class attributes: ``status`` (the HTTP status of its
problem+json answer), ``title`` and ``retryable`` (whether a client may send the same request again,
with the same Idempotency-Key). ``controller/problems.py`` answers an error with its class's status, and
``metadata_client/retry.py`` turns a problem+json reply back into the class of its status
(``class_for_status``): one table, read in both directions. An error about the process's own set-up
(a config file, a damaged dump) keeps the root's 500: if it ever reached a request, the caller did
nothing wrong.

Errors of the libraries kfed calls (httpx, aiohttp, pysyncobj, confluent-kafka, pyspark) are translated
into this tree by the one module that calls the library; nobody tells errors apart by their message.

    KfedError                         500  the root
    ├── InvalidRequest                422  bad input; ``field`` names it
    ├── Unauthorized                  401  no token, or one this node does not know
    ├── Forbidden                     403  a known token that does not allow the request
    ├── NotFound                      404
    ├── Conflict                      409  valid, but does not fit the metadata
    ├── Gone                          410  below the retention window
    ├── PayloadTooLarge               413
    ├── TooManyRequests               429  retryable, after ``retry_after_s``
    ├── Unavailable                   503  retryable, after ``retry_after_s``
    ├── OutcomeUnknown                504  retryable with the same Idempotency-Key
    ├── NotAController                502  an HTTP reply that is not kfed's (another server on the port)
    ├── InvalidSetting                500  this process's own settings
    └── CorruptData                   500  bytes or state that break the log's invariants

Each package derives its own errors from these and draws them in its face (its ``__init__.py``): the core's
are in ``metadata_log``'s, the gateway's in ``gateway``'s, and so on (``tests/unit/test_errors.py`` holds that
every class is drawn where it lives).

A second, standard base (``ValueError``, ``OSError``) stays where callers catch the standard one.
"""

from __future__ import annotations

from typing import Any


class KfedError(Exception):
    """Base of every error kfed defines. ``extra`` becomes problem+json extension members."""

    status: int = 500
    title: str = "Error"
    retryable: bool = False
    retry_after_s: float | None = None  # set on the retryable errors that say when (the Retry-After header)

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    @classmethod
    def from_problem(cls, detail: str, members: dict[str, Any]) -> KfedError:
        """The error a problem+json reply of this class describes (its extension members in ``extra``)."""
        return cls(detail, **members)

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other arguments than ``args``: rebuild from the attributes (pickling, e.g. to
        # another process) instead of calling the class again.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[KfedError], args: tuple[Any, ...], state: dict[str, Any]) -> KfedError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InvalidRequest(KfedError):
    """Bad input; ``field`` names the offending field (dotted path for nested ones)."""

    status = 422
    title = "Invalid request"

    def __init__(self, field: str, detail: str, **extra: Any) -> None:
        super().__init__(detail, field=field, **extra)
        self.field = field

    @classmethod
    def from_problem(cls, detail: str, members: dict[str, Any]) -> KfedError:
        members = dict(members)
        return cls(str(members.pop("field", "body")), detail, **members)


class Unauthorized(KfedError):
    """No credentials, or a token this node does not know."""

    status = 401
    title = "Unauthorized"


class Forbidden(KfedError):
    """A known token that does not allow this request, e.g. the read token on an admin write."""

    status = 403
    title = "Forbidden"


class NotFound(KfedError):
    status = 404
    title = "Not found"


class Conflict(KfedError):
    """The request is valid but does not fit the current metadata (or lost a race to another write)."""

    status = 409
    title = "Conflict"


class Gone(KfedError):
    """The requested offsets are below the retention window; read the snapshot instead."""

    status = 410
    title = "Offset below the retention window"


class PayloadTooLarge(KfedError):
    status = 413
    title = "Payload too large"


class _RetryAfter(KfedError):
    """An error that tells the caller to come back after ``retry_after_s``."""

    retryable = True

    def __init__(self, detail: str, retry_after_s: float = 1.0, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after_s = retry_after_s


class TooManyRequests(_RetryAfter):
    """A per-client limit was reached (e.g. open log streams); retry after ``retry_after_s``."""

    status = 429
    title = "Too many requests"


class Unavailable(_RetryAfter):
    """No leader right now (or the node is not ready); retry after ``retry_after_s``."""

    status = 503
    title = "Service unavailable"


class OutcomeUnknown(KfedError):
    """The write may or may not have committed; retrying with the same Idempotency-Key is safe."""

    status = 504
    title = "Outcome unknown"
    retryable = True


class NotAController(KfedError):
    """A reply from something that is not a kfed controller (an HTML error page of another server, a
    proxy's). Its ``status`` is the reply's; it is retryable when that status is (a proxy's 502-504)."""

    status = 502
    title = "Not a kfed controller"

    def __init__(self, url: str, status: int, content_type: str) -> None:
        media_type = content_type.split(";")[0].strip() or "no content type"
        super().__init__(f"{url}: not a kfed controller (HTTP {status} {media_type})")
        self.status = status  # the reply's
        # a proxy's 502 (its upstream failed) is as passing as a 503 or a 504
        self.retryable = status == NotAController.status or class_for_status(status).retryable


class InvalidSetting(KfedError):
    """A setting of this process (a config file, a token file, a source option) cannot be used; the
    message names it."""

    title = "Invalid setting"


class CorruptData(KfedError):
    """Bytes or state that break the log's invariants: a damaged file, a hostile or broken peer."""

    title = "Corrupt data"


WIRE_ERRORS: tuple[type[KfedError], ...] = (
    InvalidRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    Gone,
    PayloadTooLarge,
    TooManyRequests,
    Unavailable,
    OutcomeUnknown,
)
"""The classes a kfed node answers with, one per status: a client rebuilds these from a reply."""

_BY_STATUS: dict[int, type[KfedError]] = {cls.status: cls for cls in WIRE_ERRORS}
assert len(_BY_STATUS) == len(WIRE_ERRORS), "two wire errors share a status"


def class_for_status(status: int) -> type[KfedError]:
    """The class of a kfed error reply with this HTTP status (``KfedError`` for any other status)."""
    return _BY_STATUS.get(status, KfedError)
