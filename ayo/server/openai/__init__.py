"""OpenAI-compatible endpoints: ``GET /v1/models``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``POST /v1/embeddings``.

Existing OpenAI clients work unchanged (``openai.AsyncOpenAI(base_url=URL + "/v1")``). Model ids:
the LLM (``smollm2-135m-instruct``), the embedder (``all-minilm-l6-v2``) and ``app:NAME`` for
every app: on chat completions, an app model runs that app on the last user message and answers
with its ``answer`` output. Every request is a query of the App, as an app query is (the
``@completion`` and ``@embedding`` workflows, ``ayo.apps.completion``): the same query slots
(waiting in line when all are taken; 429 when the line is full), the same engine schedulers and
step order, the same metrics and traces. Chat prompts are rendered with the model's own chat
template (the SmolLM2 GGUF carries its ChatML template) and tokenized once.
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from aiohttp import web

from ayo.server.errors import ApiError, bad_request, field, read_json
from ayo.server.openai.chat import chat_completions, completions
from ayo.server.openai.requests import check_model
from ayo.server.openai.schema import OPENAPI_PATHS
from ayo.server.state import STATE

MAX_EMBED_INPUTS = 2048  # as OpenAI's limit per request


async def list_models(request: web.Request) -> web.Response:
    """Every model id the server answers to, OpenAI's list shape."""
    state = request.app[STATE]
    created = int(state.started_at)
    data = [
        {"id": model_id, "object": "model", "created": created, "owned_by": "ayo"}
        for model_id in state.model_ids
    ]
    return web.json_response({"object": "list", "data": data})


async def embeddings(request: web.Request) -> web.Response:
    """Embed ``input`` (a string or a list of strings) with the embedder engine (which batches
    these with the apps' embeddings). ``usage`` counts the tokens embedded (special tokens
    included, after truncation to the model's limit)."""
    state = request.app[STATE]
    body = await read_json(request)
    model = field(body, "model", str, required=True)
    check_model(state, model, "embedder")
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise bad_request("field 'input' must be a string or a non-empty list of strings")
    if len(texts) > MAX_EMBED_INPUTS:
        raise bad_request(f"field 'input' holds {len(texts)} texts; at most {MAX_EMBED_INPUTS}")
    if any(not t.strip() for t in texts):
        raise bad_request("field 'input' holds an empty string; every text needs content")
    fmt = field(body, "encoding_format", str, "float")
    if fmt not in ("float", "base64"):
        raise bad_request(f"field 'encoding_format' must be 'float' or 'base64', got {fmt!r}")
    dims = field(body, "dimensions", int, None)
    if dims is not None and dims != state.embedder.dim:
        raise bad_request(f"field 'dimensions' must be {state.embedder.dim} for {model!r}")
    try:
        vectors = np.asarray(
            await state.app.embed(texts, deadline=state.config.query_timeout_s), dtype=np.float32
        )
    except Exception as exc:
        from ayo.server.mapping import to_api_error

        raise to_api_error(exc) from None
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": _encode(vec, fmt),
        }
        for i, vec in enumerate(vectors)
    ]
    counts = await asyncio.to_thread(state.embedder.count_tokens, texts)
    used = int(np.minimum(counts, state.embedder.max_length).sum())
    return web.json_response(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": used, "total_tokens": used},
        }
    )


def _encode(vec: np.ndarray, fmt: str) -> list[float] | str:
    if fmt == "base64":  # little-endian float32 bytes, as OpenAI sends them
        return base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
    return vec.tolist()


def add_routes(app: web.Application) -> None:
    """Register the OpenAI-compatible routes (their OpenAPI items: ``OPENAPI_PATHS``)."""
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/embeddings", embeddings)


__all__ = ["OPENAPI_PATHS", "ApiError", "add_routes"]
