"""Server-sent events for a streamed app query.

    event: delta            (any number: answer text as it is decoded)
    data: {"text": "..."}

    event: result           (last: the same object as the non-streaming response)
    data: {"outputs": {...}, "latency_ms": ..., "trace": ...}

    event: error            (instead of ``result`` when the query fails after the stream began)
    data: {"error": {"type": ..., "message": ...}}

A query that fails before its first event is answered with a plain JSON error and its status
(400, 422, 429, ...). A client that goes away cancels the query: the handler is cancelled (or
its next write fails), the stream generator is closed, and closing it cancels the query, which
releases its LLM sequences.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from aiohttp import web

from ayo.server.mapping import to_api_error
from ayo.server.replies import dumps, result_json
from ayo.server.state import ServerState

log = logging.getLogger(__name__)


def sse_event(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


async def stream_query(request: web.Request, state: ServerState, q: Any) -> web.StreamResponse:
    events = state.app.stream(q.app, q.inputs, optimize=q.optimize, deadline=q.deadline)
    async with contextlib.aclosing(events):
        try:
            event = await anext(events)
        except Exception as exc:  # before any byte was sent: a plain JSON error
            raise to_api_error(exc) from None
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        try:
            while True:
                if event.result is not None:
                    await response.write(sse_event("result", result_json(event.result, q.trace)))
                    break
                if event.delta:
                    await response.write(sse_event("delta", {"text": event.delta}))
                event = await anext(events)
        except (ConnectionError, StopAsyncIteration):
            log.info("client left a streamed %s query; cancelling it", q.app)
            return response
        except Exception as exc:
            await response.write(sse_event("error", to_api_error(exc).to_json()))
        await response.write_eof()
    return response
