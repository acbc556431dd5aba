"""Writing OpenAI-style streams: ``data: {chunk}`` server-sent events, then ``data: [DONE]``.

The first piece is awaited before the headers go out, so a request that fails at once is still a
plain JSON error with its status; an error after that is sent as ``data: {"error": ...}``. A
write that fails (the client left) ends the stream, which closes the generation behind it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from ayo.server.errors import ApiError
from ayo.server.openai.requests import StreamOptions

log = logging.getLogger(__name__)


def usage_json(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """OpenAI's ``usage``; with ``cached``, ``prompt_tokens_details.cached_tokens``: the
    prompt's tokens whose KV the prefix cache held (not computed again)."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}  # fmt: skip
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


class EventStream:
    """An SSE response of ``data:`` lines; ``send`` returns False once the client is gone."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, data: Any) -> bool:
        line = data if isinstance(data, str) else json.dumps(data)
        try:
            await self.response.write(f"data: {line}\n\n".encode())
        except ConnectionError:
            return False
        return True

    async def close(self) -> web.StreamResponse:
        if await self.send("[DONE]"):
            with contextlib.suppress(ConnectionError):
                await self.response.write_eof()
        return self.response


async def stream_chunks(
    request: web.Request,
    pieces: AsyncIterator[Any],
    chunk: Callable[[Any], dict[str, Any]],
    head: dict[str, Any],
    opts: StreamOptions,
    n_prompt: int,
    first: dict[str, Any] | None = None,
) -> web.StreamResponse:
    """Write ``pieces`` as chunks; the first piece is awaited before the headers go out, so an
    early failure is still a plain JSON error with its status."""
    extra = {"usage": None} if opts.include_usage else {}
    it = aiter(pieces)
    try:
        try:
            head_piece = await anext(it)
        except StopAsyncIteration:
            head_piece = None
        sse = EventStream(request)
        await sse.open()
        completion, cached = 0, 0
        try:
            if first is not None and not await sse.send({**first, **extra}):
                return sse.response
            piece = head_piece
            while piece is not None:
                completion += piece.completion_tokens
                cached += getattr(piece, "cached_tokens", 0)
                if not await sse.send({**chunk(piece), **extra}):
                    log.info("client left a streamed completion; closing its sequence")
                    return sse.response
                piece = await anext(it, None)
        except ApiError as exc:
            await sse.send(exc.to_json())
            return await sse.close()
        except Exception:  # a bug after the headers went out: log it, end the stream cleanly
            log.exception("streamed completion failed")
            await sse.send(
                ApiError(500, "server_error", "internal server error (logged)").to_json()
            )
            return await sse.close()
        if opts.include_usage:
            await sse.send(
                {**head, "choices": [], "usage": usage_json(n_prompt, completion, cached)}
            )
        return await sse.close()
    finally:
        await it.aclose()
