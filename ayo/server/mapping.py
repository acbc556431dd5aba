"""Runtime and engine exceptions -> :class:`ApiError` (status, type, message)."""

from __future__ import annotations

import logging

from ayo.scheduler import DeadlineExceeded, ExecutionError, PlanError
from ayo.scheduler.batching.engine_scheduler import EngineStopped, QueueFull
from ayo.server.errors import ApiError

log = logging.getLogger(__name__)


def _causes(exc: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or (exc.__context__ if not exc.__suppress_context__ else None)
    return chain


def to_api_error(exc: BaseException) -> ApiError:
    """The answer for a failed query or engine request.

    - ``PlanError`` (inputs that do not fit the app) -> 400;
    - ``QueueFull`` (App ``max_queries`` or an engine queue) -> 429;
    - ``ContextLengthExceeded`` (prompt over the context window) -> 422;
    - ``UnknownCollection`` -> 404; other ``InvalidRequest`` -> 400;
    - ``DeadlineExceeded`` -> 504; a closed engine -> 503;
    - anything else -> 500 with the runtime's message (which names the failed primitive), never
      a traceback (that goes to the log).
    """
    from ayo.engines.errors import EngineClosed, InvalidRequest, UnknownCollection
    from ayo.engines.llm.errors import ContextLengthExceeded

    if isinstance(exc, ApiError):
        return exc
    for cause in _causes(exc):
        if isinstance(cause, ApiError):
            return cause
        if isinstance(cause, PlanError):
            return ApiError(400, "invalid_request_error", str(cause))
        if isinstance(cause, QueueFull):
            return ApiError(429, "rate_limit_error", f"{cause}")
        if isinstance(cause, ContextLengthExceeded):
            return ApiError(422, "context_length_exceeded", str(cause))
        if isinstance(cause, UnknownCollection):
            return ApiError(404, "not_found_error", str(cause))
        if isinstance(cause, InvalidRequest):
            return ApiError(400, "invalid_request_error", str(cause))
        if isinstance(cause, DeadlineExceeded):
            return ApiError(504, "timeout", f"{cause} (raise 'deadline' or the server's timeout)")
        if isinstance(cause, (EngineClosed, EngineStopped)):
            return ApiError(503, "unavailable", f"the engines are shutting down: {cause}")
    if isinstance(exc, ExecutionError):
        log.warning("query failed: %s", exc, exc_info=exc)
        return ApiError(500, "server_error", str(exc))
    log.error("unexpected error", exc_info=exc)
    return ApiError(500, "server_error", "internal server error (logged on the server)")
