"""The aiohttp application: middlewares (errors, API key) and every route.

``create_app(state)`` builds it; the engines' lifecycle (load, start, close) belongs to the caller
(:mod:`ayo.server.lifecycle` for ``python -m ayo.server``, the fixtures in tests).
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from aiohttp import web

from ayo.server.errors import ApiError, Handler, error_middleware
from ayo.server.state import STATE, ServerState

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health"})


@web.middleware
async def tracking_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Keeps the task serving each request in ``state.handlers``, so that shutdown can wait
    for them, then cancel what is left (aiohttp's own shutdown waits but never cancels a
    handler that is not reading its body)."""
    handlers = request.app[STATE].handlers
    task = asyncio.current_task()
    handlers.add(task)
    try:
        return await handler(request)
    finally:
        handlers.discard(task)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """When an API key is configured, every route but ``/health`` needs
    ``Authorization: Bearer KEY`` (401 otherwise)."""
    key = request.app[STATE].config.api_key
    if key and request.path not in OPEN_PATHS:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), key):
            raise ApiError(
                401,
                "authentication_error",
                "missing or wrong API key: send 'Authorization: Bearer KEY'",
            )
    return await handler(request)


def create_app(state: ServerState) -> web.Application:
    """The server's application over ``state`` (engines already built; started by the first
    query or by the caller)."""
    app = web.Application(
        client_max_size=state.config.max_body_bytes,
        middlewares=[tracking_middleware, error_middleware, auth_middleware],
    )
    app[STATE] = state
    from ayo.server import routes_apps, routes_collections, routes_ops

    routes_ops.add_routes(app)
    routes_apps.add_routes(app)
    routes_collections.add_routes(app)
    try:
        from ayo.server.openai import add_routes as add_openai_routes
    except ImportError as exc:
        if exc.name != "ayo.server.openai":
            raise  # a real import error inside the module must not hide
        log.warning("OpenAI-compatible endpoints are not available (no ayo.server.openai)")
    else:
        add_openai_routes(app)
    return app
