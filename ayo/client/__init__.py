"""``AsyncClient``: Ayo's Python async client (aiohttp), with typed results and errors.

    async with AsyncClient("http://127.0.0.1:8000") as client:
        result = await client.query("naive_rag", {"question": "Who wrote Hamlet?"})
        print(result.answer)
        async for item in client.stream("naive_rag", {"question": "..."}):
            if isinstance(item, StreamDelta):
                print(item.text, end="")
        reply = await client.chat([{"role": "user", "content": "Hi"}], max_tokens=16)
        async for text in await client.chat(messages, stream=True):
            ...

A server error becomes an :class:`AyoError` subclass chosen by its HTTP status (``BadRequest``
400, ``Unauthorized`` 401, ``NotFound`` 404, ``PayloadTooLarge`` 413, ``ContextWindowExceeded``
422, ``RateLimited`` 429, ``ServerError`` 5xx) carrying the server's ``type`` and ``message``; a
transport failure (refused, reset, timed out) is ``ConnectionFailed``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import aiohttp

from ayo.client.errors import (
    AyoError,
    BadRequest,
    ConnectionFailed,
    ContextWindowExceeded,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    error_from,
)

__all__ = [  # the client, its result types and its errors
    "AppInfo",
    "AppInput",
    "AsyncClient",
    "AyoError",
    "BadRequest",
    "CollectionInfo",
    "Completion",
    "ConnectionFailed",
    "ContextWindowExceeded",
    "IngestResult",
    "ModelInfo",
    "NotFound",
    "PayloadTooLarge",
    "QueryResponse",
    "RateLimited",
    "ServerError",
    "StreamDelta",
    "Unauthorized",
    "Usage",
]

# ---- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryResponse:
    """An app query's result: its ``outputs`` by name, end-to-end ``latency_ms``, and the
    Chrome-trace ``trace`` when asked for (else None)."""

    outputs: dict[str, Any]
    latency_ms: float
    trace: Any = None

    @property
    def answer(self) -> Any:
        """``outputs["answer"]`` (every built-in app has one), or None."""
        return self.outputs.get("answer")


@dataclass(frozen=True)
class StreamDelta:
    """A piece of the answer's text, from :meth:`AsyncClient.stream`."""

    text: str


@dataclass(frozen=True)
class IngestResult:
    """What an ingest did: documents ``ingested``, ``duplicates`` skipped (ids already stored),
    ``chunks`` indexed."""

    collection: str
    ingested: int
    duplicates: int
    chunks: int


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    documents: int
    chunks: int


@dataclass(frozen=True)
class AppInput:
    name: str
    type: str  # "string", "array of strings"
    required: bool


@dataclass(frozen=True)
class AppInfo:
    """A served app: its ``name``, ``description``, ``inputs``, chat ``model`` id
    (``app:NAME``) and its optimized ``plan`` (JSON)."""

    name: str
    description: str
    inputs: tuple[AppInput, ...]
    model: str
    plan: Any = None


@dataclass(frozen=True)
class ModelInfo:
    id: str
    owned_by: str
    created: int


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class Completion:
    """One choice of a (chat) completion: its ``text``, why it ended, the token counts."""

    id: str
    model: str
    text: str
    finish_reason: str | None
    usage: Usage | None


# ---- the client ---------------------------------------------------------------------------


class AsyncClient:
    """Talks to an Ayo server (``python -m ayo.server``).

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000"`` (no ``/v1``).
        api_key: sent as ``Authorization: Bearer ...`` when the server wants one.
        timeout: seconds to connect, and seconds to wait for each read of a response.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 300.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- transport ------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self._session

    async def _open(self, method: str, path: str, body: Any = None) -> aiohttp.ClientResponse:
        """Send; return the response if 2xx, else raise its error (the response is released)."""
        try:
            resp = await self._http().request(method, self.base_url + path, json=body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ConnectionFailed(f"{method} {path}: {exc!r}") from exc
        if resp.status < 400:
            return resp
        try:
            text = await resp.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ConnectionFailed(f"{method} {path}: {exc!r}") from exc
        finally:
            resp.release()
        try:
            payload: Any = json.loads(text)
        except ValueError:
            payload = text
        raise error_from(resp.status, payload)

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        resp = await self._open(method, path, body)
        try:
            return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ConnectionFailed(f"{method} {path}: {exc!r}") from exc
        except ValueError as exc:
            raise ServerError(resp.status, "invalid_response", f"not JSON: {exc}") from exc
        finally:
            resp.release()

    # ---- apps -----------------------------------------------------------------------------

    @staticmethod
    def _query_body(
        inputs: Mapping[str, Any], optimize: bool, trace: bool, deadline: float | None, stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "inputs": dict(inputs),
            "optimize": optimize,
            "stream": stream,
            "trace": trace,
        }
        if deadline is not None:
            body["deadline"] = deadline
        return body

    async def query(
        self,
        app: str,
        inputs: Mapping[str, Any],
        optimize: bool = True,
        trace: bool = False,
        deadline: float | None = None,
    ) -> QueryResponse:
        """Run ``app`` on ``inputs`` (``optimize=False``: the module-by-module baseline;
        ``deadline``: seconds)."""
        body = self._query_body(inputs, optimize, trace, deadline, stream=False)
        return _query_response(await self._json("POST", f"/v1/apps/{app}/query", body))

    async def stream(
        self,
        app: str,
        inputs: Mapping[str, Any],
        optimize: bool = True,
        trace: bool = False,
        deadline: float | None = None,
    ) -> AsyncIterator[StreamDelta | QueryResponse]:
        """Run ``app``, yielding the answer's text as :class:`StreamDelta` pieces, then the
        :class:`QueryResponse`. Leaving the loop early closes the connection, which cancels the
        query on the server."""
        body = self._query_body(inputs, optimize, trace, deadline, stream=True)
        resp = await self._open("POST", f"/v1/apps/{app}/query", body)
        try:
            async for event, data in _sse(resp):
                if event == "delta":
                    yield StreamDelta(str(data.get("text", "")))
                elif event == "result":
                    yield _query_response(data)
                    return
                elif event == "error":
                    raise error_from(None, data)
        finally:
            resp.close()

    async def apps(self) -> list[AppInfo]:
        """The served apps, their inputs and plans."""
        data = await self._json("GET", "/v1/apps")
        return [
            AppInfo(
                name=a["name"],
                description=a.get("description", ""),
                inputs=tuple(AppInput(i["name"], i["type"], i["required"]) for i in a["inputs"]),
                model=a.get("model", f"app:{a['name']}"),
                plan=a.get("plan"),
            )
            for a in data["apps"]
        ]

    # ---- collections ----------------------------------------------------------------------

    async def ingest(self, collection: str, documents: Sequence[Mapping[str, Any]]) -> IngestResult:
        """Chunk, embed, index and store ``documents`` (``{"id", "text", "metadata"}`` dicts)
        in ``collection`` (created when new); ids already stored are skipped."""
        body = {"documents": [dict(d) for d in documents]}
        data = await self._json("POST", f"/v1/collections/{collection}/documents", body)
        return IngestResult(
            data.get("collection", collection),
            int(data["ingested"]),
            int(data.get("duplicates", 0)),
            int(data.get("chunks", 0)),
        )

    async def collections(self) -> list[CollectionInfo]:
        """Every collection with its document and chunk counts."""
        data = await self._json("GET", "/v1/collections")
        return [
            CollectionInfo(c["name"], int(c["documents"]), int(c.get("chunks", 0)))
            for c in data["collections"]
        ]

    # ---- OpenAI-compatible ----------------------------------------------------------------

    async def models(self) -> list[ModelInfo]:
        data = await self._json("GET", "/v1/models")
        return [
            ModelInfo(m["id"], m.get("owned_by", ""), int(m.get("created", 0)))
            for m in data["data"]
        ]

    async def complete(
        self,
        prompt: str,
        model: str = "smollm2-135m-instruct",
        max_tokens: int = 16,
        temperature: float = 0.0,
        **options: Any,
    ) -> Completion:
        """A text completion (``options``: ``top_p``, ``seed``, ``stop``, ...)."""
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": temperature, **options}  # fmt: skip
        data = await self._json("POST", "/v1/completions", body)
        return _completion(data, data["choices"][0].get("text", ""))

    @overload
    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        model: str = ...,
        stream: Literal[False] = ...,
        max_tokens: int | None = ...,
        temperature: float = ...,
        **options: Any,
    ) -> Completion: ...

    @overload
    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        model: str = ...,
        *,
        stream: Literal[True],
        max_tokens: int | None = ...,
        temperature: float = ...,
        **options: Any,
    ) -> AsyncIterator[str]: ...

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        model: str = "smollm2-135m-instruct",
        stream: bool = False,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        **options: Any,
    ) -> Completion | AsyncIterator[str]:
        """A chat completion; ``model="app:NAME"`` runs that app on the last user message.
        With ``stream=True`` returns an async iterator of text deltas (errors in the request
        raise here, before iterating)."""
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages],
                                "temperature": temperature, **options}  # fmt: skip
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if not stream:
            data = await self._json("POST", "/v1/chat/completions", body)
            return _completion(data, data["choices"][0]["message"].get("content") or "")
        resp = await self._open("POST", "/v1/chat/completions", {**body, "stream": True})
        return _chat_deltas(resp)

    async def embed(
        self, texts: str | Sequence[str], model: str = "all-minilm-l6-v2"
    ) -> list[list[float]]:
        """Embedding vectors, one per text, in order."""
        data = await self._json("POST", "/v1/embeddings", {"model": model, "input": texts})
        return [item["embedding"] for item in sorted(data["data"], key=lambda d: d["index"])]

    async def health(self) -> dict[str, Any]:
        return await self._json("GET", "/health")


# ---- parsing ------------------------------------------------------------------------------


def _query_response(data: Mapping[str, Any]) -> QueryResponse:
    return QueryResponse(dict(data["outputs"]), float(data["latency_ms"]), data.get("trace"))


def _completion(data: Mapping[str, Any], text: str) -> Completion:
    u = data.get("usage")
    usage = Usage(u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) if u else None
    return Completion(
        data["id"], data["model"], text, data["choices"][0].get("finish_reason"), usage
    )


async def _sse(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """Server-sent events as ``(event, data)``; ``data`` is parsed JSON (``[DONE]`` stays a
    string). Transport failures become ``ConnectionFailed``."""
    event, data_lines = "message", []
    try:
        while True:
            raw = await resp.content.readline()
            if not raw:
                break
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data_lines:
                    text = "\n".join(data_lines)
                    yield event, text if text == "[DONE]" else json.loads(text)
                event, data_lines = "message", []
            elif line.startswith(":"):
                continue
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "event":
                    event = value
                elif name == "data":
                    data_lines.append(value)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise ConnectionFailed(f"the stream broke: {exc!r}") from exc


async def _chat_deltas(resp: aiohttp.ClientResponse) -> AsyncIterator[str]:
    try:
        async for _, data in _sse(resp):
            if data == "[DONE]":
                return
            if "error" in data:
                raise error_from(None, data)
            for choice in data.get("choices", []):
                text = choice.get("delta", {}).get("content")
                if text:
                    yield text
    finally:
        resp.close()
