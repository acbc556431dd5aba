"""The errors of :mod:`ayo.client`: one :class:`AyoError` subclass per HTTP status the server
answers with, carrying the server's ``type`` and ``message``."""

from __future__ import annotations

from typing import Any


class AyoError(Exception):
    """An error answered by the server (or, for ``ConnectionFailed``, no answer at all)."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(f"{status} {type}: {message}")
        self.status = status
        self.type = type
        self.message = message


class BadRequest(AyoError):
    """400: malformed JSON, a wrong type, an unknown input or a value out of range."""


class Unauthorized(AyoError):
    """401: the server wants an API key (``AsyncClient(..., api_key=...)``)."""


class NotFound(AyoError):
    """404: unknown app, collection, model or path."""


class PayloadTooLarge(AyoError):
    """413: the request body is over the server's limit."""


class ContextWindowExceeded(AyoError):
    """422: the prompt does not fit the model's context window."""


class RateLimited(AyoError):
    """429: the server's queues are full; retry later."""


class ServerError(AyoError):
    """5xx: the server failed (its message says why)."""


class ConnectionFailed(AyoError):
    """The server could not be reached, or the connection broke or timed out."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "connection_error", message)


_BY_STATUS: dict[int, type[AyoError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    413: PayloadTooLarge,
    422: ContextWindowExceeded,
    429: RateLimited,
}


_STATUS_BY_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "not_found_error": 404,
    "request_too_large": 413,
    "context_length_exceeded": 422,
    "rate_limit_error": 429,
    "unavailable": 503,
    "timeout": 504,
}


def error_from(status: int | None, body: Any) -> AyoError:
    """The exception for an error response (``{"error": {"type", "message"}}`` or anything);
    ``status`` None (an error event inside a stream) is inferred from the error's type."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        type_, message = str(err.get("type", "error")), str(err.get("message", ""))
    else:
        type_, message = "error", str(body)[:500]
    if status is None:
        status = _STATUS_BY_TYPE.get(type_, 500)
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else AyoError)
    return cls(status, type_, message)
