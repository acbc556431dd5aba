"""OpenAPI 3.1 path items of the OpenAI-compatible routes (merged into ``/openapi.json``).

Schemas are written here in full rather than referenced, so the dict can be merged into any
document as is; the error responses refer to ``#/components/schemas/Error`` and each item lists
the statuses its handler answers.
"""

from __future__ import annotations

from typing import Any

from ayo.server.patterns import NON_BLANK

ERROR = {"$ref": "#/components/schemas/Error"}


def _errors(*statuses: int) -> dict[str, Any]:
    why = {
        400: "malformed JSON, a wrong type (the field is named) or an unsupported option",
        401: "missing or wrong API key (when the server has one)",
        404: "unknown model",
        413: "request body over the server's limit",
        415: "a content-type other than application/json",
        422: "prompt over the model's context window (context_length_exceeded)",
        429: "the server is at its limit of concurrent requests",
        500: "the engine failed",
    }
    return {
        str(s): {"description": why[s], "content": {"application/json": {"schema": ERROR}}}
        for s in statuses
    }


_NULLABLE_INT = {"type": ["integer", "null"], "minimum": 1}
_NON_BLANK = NON_BLANK
_STOP = {
    "description": "generation stops before the first occurrence of any (left out of the text)",
    "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 16},
        {"type": "null"},
    ],
}
_SAMPLING = {
    "max_tokens": {
        **_NULLABLE_INT,
        "description": "tokens to generate (completions: 16; "
        "chat: up to the context window, at most the server's max_tokens_limit)",
    },
    "max_completion_tokens": {**_NULLABLE_INT, "description": "alias of max_tokens (wins)"},
    "temperature": {
        "type": "number",
        "minimum": 0,
        "maximum": 2,
        "default": 1,
        "description": "0 is greedy decoding",
    },
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1},
    "top_k": {
        "type": "integer",
        "minimum": -1,
        "maximum": 1 << 20,
        "default": 0,
        "description": "extension: keep the k likeliest tokens (0 or -1: all)",
    },
    "seed": {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 2**63 - 1,
        "description": "makes sampling reproducible",
    },
    "frequency_penalty": {
        "type": "number",
        "minimum": -2,
        "maximum": 2,
        "default": 0,
        "description": "subtracted from a token's logit once per earlier occurrence in the output",
    },
    "presence_penalty": {
        "type": "number",
        "minimum": -2,
        "maximum": 2,
        "default": 0,
        "description": "subtracted from a token's logit if it occurred in the output",
    },
    "repetition_penalty": {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 2,
        "default": 1,
        "description": "extension (transformers' rule): logits of tokens in the prompt or output "
        "divided by it when positive, multiplied when negative; 1 is off",
    },
    "stop": _STOP,
    "n": {"type": "integer", "enum": [1], "default": 1},
    "ignore_eos": {
        "type": "boolean",
        "default": False,
        "description": "extension: keep generating past the end-of-sequence token",
    },
    "response_format": {
        "type": ["object", "null"],
        "description": "structured output: {'type': 'text'}, {'type': 'json_object'} or "
        "{'type': 'json_schema', 'json_schema': {'name', 'schema', 'strict'}}; a schema the "
        "grammar library cannot compile is a 400",
        "properties": {"type": {"enum": ["text", "json_object", "json_schema"]}},
    },
    "guided_json": {
        "type": ["object", "boolean", "null"],
        "description": "extension (vLLM): a JSON schema the output must satisfy",
    },
    "guided_regex": {
        "type": ["string", "null"],
        "minLength": 1,
        "description": "extension (vLLM): a regular expression the output must match in full",
    },
    "guided_choice": {
        "type": ["array", "null"],
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "description": "extension (vLLM): the output is exactly one of these strings",
    },
    "stream": {"type": "boolean", "default": False},
    "stream_options": {
        "type": ["object", "null"],
        "description": "only with stream: true",
        "properties": {"include_usage": {"type": ["boolean", "null"]}},
    },
}
_USAGE = {
    "type": "object",
    "properties": {
        **{k: {"type": "integer"} for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
        "prompt_tokens_details": {
            "type": "object",
            "description": "cached_tokens: the prompt's tokens served by the prefix cache",
            "properties": {"cached_tokens": {"type": "integer"}},
        },
    },
}
_FINISH = {"type": ["string", "null"], "enum": ["stop", "length", "tool_calls", None]}
_SSE = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "with stream: true, one event per chunk ('data: {chunk}'), then "
            "'data: [DONE]'",
            "properties": {"data": {"type": "string"}},
        }
    }
}
# stream_options with an option in it needs stream: true (OpenAI's rule)
_STREAM_OPTIONS_NEED_STREAM = {
    "if": {
        "properties": {
            "stream_options": {  # an object with an option that is not null
                "type": "object",
                "not": {"additionalProperties": {"type": "null"}},
            }
        },
        "required": ["stream_options"],
    },
    "then": {"properties": {"stream": {"const": True}}, "required": ["stream"]},
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _object(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


def _request(required: list[str], **props: Any) -> dict[str, Any]:
    """A completion or chat request body (sampling fields included)."""
    return {**_object(required, **props, **_SAMPLING), "allOf": [_STREAM_OPTIONS_NEED_STREAM]}


def _response(object_name: str, content: str, content_schema: dict[str, Any]) -> dict[str, Any]:
    """A (chat) completion response: one choice carrying ``content``."""
    return _object(
        ["id", "object", "created", "model", "choices", "usage"],
        id={"type": "string"},
        object={"const": object_name},
        created={"type": "integer"},
        model={"type": "string"},
        choices={
            "type": "array",
            "items": _object(
                ["index", content, "finish_reason"],
                index={"type": "integer"},
                logprobs={
                    "type": ["object", "null"],
                    "description": "null unless asked; chat: {'content': [{token, logprob, "
                    "bytes, top_logprobs}]}; completions: {tokens, token_logprobs, "
                    "top_logprobs, text_offset}",
                },
                finish_reason=_FINISH,
                **{content: content_schema},
            ),
        },
        usage=_USAGE,
    )


_COMPLETION = _response("text_completion", "text", {"type": "string"})
_TOOL_CALL = _object(
    ["id", "type", "function"],
    id={"type": "string"},
    type={"const": "function"},
    function=_object(
        ["name", "arguments"],
        name={"type": "string"},
        arguments={"type": "string", "description": "the arguments as JSON text"},
    ),
)
_CHAT = _response(
    "chat.completion",
    "message",
    _object(
        ["role", "content"],
        role={"const": "assistant"},
        content={"type": ["string", "null"], "description": "null when the reply is tool calls"},
        tool_calls={"type": "array", "items": _TOOL_CALL},
    ),
)
_TOOL = _object(
    ["type", "function"],
    type={"const": "function"},
    function=_object(
        ["name"],
        name={"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,64}$"},
        description={"type": "string"},
        parameters={"type": "object", "description": "the arguments' JSON schema"},
    ),
)
_MESSAGE = _object(
    ["role"],
    role={"enum": ["system", "developer", "user", "assistant", "tool"]},
    tool_calls={"type": "array", "items": _TOOL_CALL, "description": "assistant messages"},
    tool_call_id={
        "type": "string",
        "description": "tool messages: the id of the call answered (400 for an id no earlier "
        "assistant message called)",
    },
    content={
        "oneOf": [
            {"type": "string"},
            {"type": "null"},
            {
                "type": "array",
                "items": _object(["type", "text"], type={"const": "text"}, text={"type": "string"}),
            },
        ]
    },
)

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/models": {
        "get": {
            "summary": "List models: the LLM, the embedder, and app:NAME for every app",
            "tags": ["openai"],
            "responses": {
                "200": {
                    "description": "the models",
                    "content": _json(
                        _object(
                            ["object", "data"],
                            object={"const": "list"},
                            data={
                                "type": "array",
                                "items": _object(
                                    ["id", "object", "created", "owned_by"],
                                    id={"type": "string"},
                                    object={"const": "model"},
                                    created={"type": "integer"},
                                    owned_by={"type": "string"},
                                ),
                            },
                        )
                    ),
                },
                **_errors(401),
            },
        }
    },
    "/v1/completions": {
        "post": {
            "summary": "Complete a prompt with the LLM (OpenAI-compatible)",
            "tags": ["openai"],
            "requestBody": {
                "required": True,
                "content": _json(
                    _request(
                        ["model", "prompt"],
                        model={"type": "string"},
                        logprobs={
                            "type": ["integer", "null"],
                            "minimum": 0,
                            "maximum": 5,
                            "description": "each token's log-probability and this many "
                            "likeliest alternatives",
                        },
                        prompt={
                            "description": "a string, a list of strings, token ids, or a list of "
                            "token-id lists (one choice each)",
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"type": "string"}},
                                {"type": "array", "items": {"type": "integer"}},
                                {
                                    "type": "array",
                                    "items": {"type": "array", "items": {"type": "integer"}},
                                },
                            ],
                        },
                    )
                ),
            },
            "responses": {
                "200": {
                    "description": "the completion (or its SSE chunks)",
                    "content": {**_json(_COMPLETION), **_SSE},
                },
                **_errors(400, 401, 404, 413, 415, 422, 429, 500),
            },
        }
    },
    "/v1/chat/completions": {
        "post": {
            "summary": "Chat with the LLM, or run app:NAME on the last user message",
            "tags": ["openai"],
            "requestBody": {
                "required": True,
                "content": _json(
                    _request(
                        ["model", "messages"],
                        model={"type": "string"},
                        logprobs={"type": ["boolean", "null"], "default": False},
                        top_logprobs={
                            "type": ["integer", "null"],
                            "minimum": 0,
                            "maximum": 20,
                            "description": "alternatives per token; needs logprobs: true",
                        },
                        messages={"type": "array", "minItems": 1, "items": _MESSAGE},
                        tools={
                            "type": ["array", "null"],
                            "items": _TOOL,
                            "description": "functions the model may call; calls are "
                            "constrained to the tools' schemas (not with response_format)",
                        },
                        tool_choice={
                            "description": "auto (default with tools), none, required, or "
                            "{'type': 'function', 'function': {'name'}}",
                            "oneOf": [
                                {"enum": ["auto", "none", "required"]},
                                _object(
                                    ["type", "function"],
                                    type={"const": "function"},
                                    function=_object(["name"], name={"type": "string"}),
                                ),
                                {"type": "null"},
                            ],
                        },
                        parallel_tool_calls={"type": ["boolean", "null"], "default": True},
                    )
                ),
            },
            "responses": {
                "200": {
                    "description": "the reply (or its chat.completion.chunk SSE chunks)",
                    "content": {**_json(_CHAT), **_SSE},
                },
                **_errors(400, 401, 404, 413, 415, 422, 429, 500),
            },
        }
    },
    "/v1/embeddings": {
        "post": {
            "summary": "Embed texts with the embedder (OpenAI-compatible)",
            "tags": ["openai"],
            "requestBody": {
                "required": True,
                "content": _json(
                    _object(
                        ["model", "input"],
                        model={"type": "string"},
                        input={
                            "oneOf": [
                                _NON_BLANK,
                                {
                                    "type": "array",
                                    "items": _NON_BLANK,
                                    "minItems": 1,
                                    "maxItems": 2048,
                                },
                            ]
                        },
                        encoding_format={"enum": ["float", "base64"], "default": "float"},
                        dimensions={"type": "integer"},
                    )
                ),
            },
            "responses": {
                "200": {
                    "description": "one vector per input, in order",
                    "content": _json(
                        _object(
                            ["object", "data", "model", "usage"],
                            object={"const": "list"},
                            data={
                                "type": "array",
                                "items": _object(
                                    ["object", "index", "embedding"],
                                    object={"const": "embedding"},
                                    index={"type": "integer"},
                                    embedding={
                                        "oneOf": [
                                            {"type": "array", "items": {"type": "number"}},
                                            {"type": "string", "contentEncoding": "base64"},
                                        ]
                                    },
                                ),
                            },
                            model={"type": "string"},
                            usage=_object(
                                ["prompt_tokens", "total_tokens"],
                                prompt_tokens={"type": "integer"},
                                total_tokens={"type": "integer"},
                            ),
                        )
                    ),
                },
                **_errors(400, 401, 404, 413, 415, 422, 429, 500),
            },
        }
    },
}
