"""HTTP errors of the server: one JSON shape, ``{"error": {"type": ..., "message": ...}}``.

Handlers raise :class:`ApiError`; :func:`error_middleware` turns it, aiohttp's own HTTP errors
(unknown route, wrong method, body over ``client_max_size``) and any unexpected exception into
that shape. An unexpected exception is logged with its traceback and answered with a generic
500: the client never sees a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    422: "context_length_exceeded",
    429: "rate_limit_error",
    500: "server_error",
    501: "not_implemented",
    503: "unavailable",
    504: "timeout",
}


class ApiError(Exception):
    """An error answered to the client: HTTP ``status``, error ``type`` and ``message``."""

    def __init__(self, status: int, type: str | None = None, message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.type = type or ERROR_TYPES.get(status, "server_error")
        self.message = message

    def to_json(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message}}

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.type!r}, {self.message!r})"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found_error", message)


def error_response(exc: ApiError) -> web.Response:
    """The JSON response for ``exc`` (``WWW-Authenticate`` on 401)."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return web.json_response(exc.to_json(), status=exc.status, headers=headers)


def _from_http(exc: web.HTTPException) -> ApiError:
    if exc.status == 404:
        return not_found("no such route; GET /openapi.json lists the endpoints")
    if exc.status == 405:
        return ApiError(405, "invalid_request_error", f"method not allowed ({exc.reason})")
    if exc.status == 413:
        return ApiError(413, "request_too_large", f"request body too large: {exc.text or ''}")
    return ApiError(exc.status, None, exc.reason or "")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every failure as JSON (see the module doc); a streaming handler that has already
    sent its headers reports its own errors in the stream."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:  # redirects and the like pass through
            raise
        response = error_response(_from_http(exc))
        if exc.status == 405 and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except ConnectionResetError:  # the client left; nobody to answer
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(
            ApiError(500, "server_error", "internal server error (logged on the server)")
        )


JSON_CONTENT_TYPES = ("application/json", "")  # "" = no content-type header: curl -d and the like
THREAD_PARSE_BYTES = 256 * 1024  # bodies over this are parsed off the event loop


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object: 400 when malformed, not an object, holding a number
    that is not finite or a string that is not valid Unicode (a lone surrogate); 413 when over
    the server's body limit; 415 when the content-type says it is not JSON. A large body is
    parsed in a worker thread, so the event loop never spends body-sized time on it."""
    ctype = request.content_type if request.headers.get("Content-Type") else ""
    if ctype not in JSON_CONTENT_TYPES and not ctype.endswith("+json"):
        raise ApiError(
            415,
            "invalid_request_error",
            f"content-type {ctype!r} is not JSON: send 'content-type: application/json'",
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise ApiError(
            413, "request_too_large", f"{exc.text} (in bytes; the server sets it: --max-body-mb)"
        ) from None
    if not raw:
        raise bad_request("the request needs a JSON body")
    if len(raw) > THREAD_PARSE_BYTES:
        body = await asyncio.to_thread(parse_json_body, raw)
    else:
        body = parse_json_body(raw)
    if not isinstance(body, dict):
        raise bad_request(f"the JSON body must be an object, got {type(body).__name__}")
    return body


def parse_json_body(raw: bytes) -> Any:
    """``json.loads`` with the server's rules (see :func:`read_json`); raises 400 ApiErrors."""
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise bad_request("malformed JSON body: nested too deeply") from None
    where = _invalid_text(body, "")
    if where is not None:
        raise bad_request(
            f"field {where or '(body)'!r} holds a lone surrogate (\\ud800-\\udfff without its "
            "pair): text must be valid Unicode"
        )
    return body


def _invalid_text(value: Any, path: str) -> str | None:
    """The path of the first string (key or value) that cannot be encoded as UTF-8."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not _utf8_ok(value):
                return path
        elif isinstance(value, dict):
            for key, item in value.items():
                sub = f"{path}.{key}" if path else key
                if not _utf8_ok(key):
                    return sub
                stack.append((item, sub))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
    return None


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _no_constant(name: str) -> None:
    raise bad_request(f"malformed JSON body: {name} is not a JSON number (numbers must be finite)")


_TYPE_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}

_MISSING: Any = object()


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, types)


def field(
    body: dict[str, Any],
    name: str,
    type_: type | tuple[type, ...],
    default: Any = None,
    *,
    required: bool = False,
    nullable: bool = True,
) -> Any:
    """``body[name]`` checked against ``type_`` (400 naming the field when wrong or missing).
    ``null`` or absence gives ``default`` unless ``required``; ints pass as floats."""
    types = type_ if isinstance(type_, tuple) else (type_,)
    value = body.get(name, _MISSING)
    if value is _MISSING or (value is None and nullable and not required):
        if required:
            raise bad_request(f"missing required field {name!r}")
        return default
    if int in types and integral(value) is not None:
        value = integral(value)
    if not _type_ok(value, types):
        want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise bad_request(f"field {name!r} must be {want}, got {json.dumps(value)[:80]}")
    return float(value) if types == (float,) else value


def integral(value: Any) -> int | None:
    """``value`` as an int when JSON Schema calls it an integer (``20`` or ``20.0``; not
    ``true``), else None."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number_in(value: float | None, name: str, low: float, high: float | None = None) -> None:
    """400 unless ``low <= value (<= high)``; ``None`` passes, NaN does not."""
    if value is None:
        return
    if not low <= value or (high is not None and not value <= high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise bad_request(f"field {name!r} must be {bound}, got {value}")


def reject_unknown(body: dict[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    """400 naming fields of ``body`` not in ``allowed`` (a misspelled option fails loudly)."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise bad_request(f"unknown field(s) {unknown} in {where}; allowed: {sorted(allowed)}")
