"""Small helpers for the server tests: SSE parsing and a bounded wait on a condition."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` pairs of a ``text/event-stream`` response, data parsed as JSON."""
    event, data = "message", []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    """True once ``check()`` holds (it reads state of another thread), False after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def error_of(response: aiohttp.ClientResponse) -> dict[str, str]:
    """The ``error`` object of a JSON error response (asserting the shape)."""
    assert response.content_type == "application/json", await response.text()
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}, body
    assert "Traceback" not in body["error"]["message"]
    return body["error"]
