"""The OpenAPI 3.1 document served at ``GET /openapi.json`` (written as data, one entry per route).

A test checks that every route the application registers appears here.
"""

from __future__ import annotations

import copy
from typing import Any

from ayo.server.openai.schema import OPENAPI_PATHS
from ayo.server.patterns import NON_BLANK, NOT_WHITESPACE, PROMPT_TEXT

ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(
    summary: str,
    ok: dict[str, Any],
    errors: tuple[int, ...] = (),
    body: Any = None,
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", **ok}}
    for status in errors:
        responses[str(status)] = {"description": "error", **_json(ERROR)}
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, **_json(body)}
    if params:
        op["parameters"] = params
    return op


def _path_param(name: str, **schema: Any) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", **schema}}


COLLECTION = _path_param("name", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


OBJ = {"type": "object"}
SSE_EVENT = {
    "description": "one server-sent event: 'delta' ({\"text\"}), then 'result' or 'error'",
    "type": "object",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
OPTIMIZE = {"name": "optimize", "in": "query", "schema": {"type": "boolean", "default": True}}
QUERY_BODY = {
    "type": "object",
    "required": ["inputs"],
    "additionalProperties": False,
    "properties": {
        "inputs": {"type": "object", "description": "the app's inputs (GET /v1/apps lists them)"},
        "optimize": {"type": "boolean", "default": True},
        "stream": {"type": "boolean", "default": False, "description": "server-sent events"},
        "trace": {"type": "boolean", "default": False, "description": "Chrome trace JSON"},
        "deadline": {"type": ["number", "null"], "minimum": 0.001, "description": "seconds"},
    },
}
QUERY_RESULT = {
    "type": "object",
    "properties": {
        "outputs": OBJ,
        "latency_ms": {"type": "number"},
        "trace": {"type": ["object", "null"]},
    },
}
INGEST_BODY = {
    "type": "object",
    "required": ["documents"],
    "additionalProperties": False,
    "properties": {
        "documents": {
            "type": "array",
            "minItems": 1,
            "maxItems": 10_000,
            "items": {
                "type": "object",
                "required": ["id", "text"],
                "additionalProperties": False,
                "properties": {
                    "id": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
                    "text": {
                        "type": "string",
                        "pattern": NOT_WHITESPACE,
                        "description": "at most --max-document-mb Mi characters (413 beyond)",
                    },
                    "title": {"type": ["string", "null"]},
                    "metadata": {"type": ["object", "null"]},
                },
            },
        },
        "on_duplicate": {"enum": ["skip", "error", None], "default": "skip"},
    },
}
DOCUMENT_PAGE = {
    "type": "object",
    "properties": {
        "documents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "metadata": OBJ,
                    "chars": {"type": "integer"},
                    "chunks": {"type": "integer"},
                },
            },
        },
        "next": {"type": ["string", "null"], "description": "pass as 'after' for the next page"},
    },
}
OPENAI_ERRORS = (400, 401, 404, 413, 415, 422, 429)

PATHS: dict[str, dict[str, Any]] = {
    "/health": {"get": _op("Liveness, loaded models, apps", _json(OBJ))},
    "/metrics": {
        "get": _op(
            "Prometheus metrics", {"content": {"text/plain": {"schema": {"type": "string"}}}}
        )
    },
    "/openapi.json": {"get": _op("This document", _json(OBJ))},
    "/v1/apps": {
        "get": _op("Apps, their inputs and plans (JSON)", _json(OBJ), (400,), None, [OPTIMIZE])
    },
    "/v1/apps/{name}/plan.svg": {
        "get": _op(
            "The app's plan drawn by Graphviz",
            {"content": {"image/svg+xml": {"schema": {"type": "string"}}}},
            (400, 404, 501),
            None,
            [_path_param("name"), OPTIMIZE],
        )
    },
    "/v1/apps/{name}/query": {
        "post": _op(
            "Run an app; with stream=true, text/event-stream of 'delta' events then 'result'",
            {
                "content": {
                    "application/json": {"schema": QUERY_RESULT},
                    "text/event-stream": {"schema": SSE_EVENT},
                }
            },
            (400, 401, 404, 413, 415, 422, 429, 504),
            QUERY_BODY,
            [_path_param("name")],
        )
    },
    "/v1/collections": {"get": _op("Collections with document counts", _json(OBJ), (401,))},
    "/v1/collections/{name}": {
        "get": _op("One collection's counts", _json(OBJ), (400, 401, 404), None, [COLLECTION])
    },
    "/v1/collections/{name}/documents": {
        "get": _op(
            "Stored documents without their text, in storage order, a page at a time",
            _json(DOCUMENT_PAGE),
            (400, 401, 404),
            None,
            [
                COLLECTION,
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                },
                {
                    "name": "after",
                    "in": "query",
                    "description": "the previous page's 'next'",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                },
            ],
        ),
        "post": _op(
            "Ingest documents (chunked, embedded, indexed, stored)",
            _json(OBJ),
            (400, 401, 409, 413, 415),
            INGEST_BODY,
            [COLLECTION],
        ),
    },
    "/v1/collections/{name}/search": {
        "post": _op(
            "Dense search: the k best chunks per query",
            _json(OBJ),
            (400, 401, 404, 415),
            {
                "type": "object",
                "required": ["query"],
                "additionalProperties": False,
                "properties": {
                    "query": {
                        "oneOf": [NON_BLANK, {"type": "array", "items": NON_BLANK, "minItems": 1}]
                    },
                    "k": {"type": ["integer", "null"], "minimum": 1, "maximum": 100, "default": 5},
                },
            },
            [COLLECTION],
        )
    },
    "/v1/models": {
        "get": _op("OpenAI-compatible model list (LLM, embedder, app:NAME)", _json(OBJ), (401,))
    },
    "/v1/completions": {
        "post": _op(
            "OpenAI-compatible text completion (stream, stop, max_tokens, temperature, seed)",
            _json(OBJ),
            OPENAI_ERRORS,
            OBJ,
        )
    },
    "/v1/chat/completions": {
        "post": _op(
            "OpenAI-compatible chat completion; model 'app:NAME' runs that app on the last "
            "user message",
            _json(OBJ),
            OPENAI_ERRORS,
            OBJ,
        )
    },
    "/v1/embeddings": {"post": _op("OpenAI-compatible embeddings", _json(OBJ), OPENAI_ERRORS, OBJ)},
}


def openapi_document(state: Any = None) -> dict[str, Any]:
    """The document; ``state`` (a ServerState) lists the apps in the query path's description."""
    from ayo import __version__

    paths = copy.deepcopy(PATHS)
    paths.update(copy.deepcopy(OPENAPI_PATHS))  # the OpenAI-compatible routes, written in full
    if state is not None:
        _describe_server(paths, state)
    for ops in paths.values():
        for op in ops.values():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                body["schema"] = nullable_optionals(body["schema"])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Ayo",
            "version": __version__,
            "description": "Ayo serves LLM applications as optimized dataflow graphs.",
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {
                        "error": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        }
                    },
                }
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _describe_server(paths: dict[str, Any], state: Any) -> None:
    """What this server serves, made exact: one query path per app with that app's inputs (a
    templated path cannot tie a body to its app), the model ids each endpoint takes, the
    limits of max_tokens and token ids."""
    from ayo.server.routes_apps import app_inputs

    template = paths.pop("/v1/apps/{name}/query")["post"]
    chat_apps = []  # the apps a chat message can run: those needing the question alone
    for name in state.app_names:
        specs = app_inputs(state, name)
        if [i.name for i in specs if i.required] == ["question"]:
            chat_apps.append(f"app:{name}")
        inputs = {
            "type": "object",
            "additionalProperties": False,
            "required": [i.name for i in specs if i.required],
            "properties": {
                i.name: NON_BLANK
                if i.type == "string"
                else {"type": "array", "items": NON_BLANK, "minItems": 1}
                for i in specs
            },
        }
        body = {**QUERY_BODY, "properties": {**QUERY_BODY["properties"], "inputs": inputs}}
        op = {**template, "summary": f"Run app {name}; " + template["summary"].split("; ", 1)[1]}
        op["requestBody"] = {"required": True, **_json(body)}
        paths[f"/v1/apps/{name}/query"] = {"post": op}
    plan = paths["/v1/apps/{name}/plan.svg"]["get"]
    plan["parameters"] = [_path_param("name", enum=list(state.app_names)), OPTIMIZE]
    _openai_limits(paths, state, chat_apps)


def _openai_limits(paths: dict[str, Any], state: Any, apps: list[str]) -> None:
    def body(path: str) -> dict[str, Any]:
        return paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]

    llm = [state.llm_id] if state.llm is not None else []
    embedder = [state.embedder_id] if state.embedder is not None else []
    limit = state.config.max_tokens_limit
    for path, models in (
        ("/v1/completions", llm),
        ("/v1/chat/completions", llm + apps),
        ("/v1/embeddings", embedder),
    ):
        if path not in paths:
            continue
        props = body(path)["properties"]  # a deep copy: ours to change
        props["model"] = {"type": "string", "enum": models}
        for key in ("max_tokens", "max_completion_tokens"):
            if key in props:
                props[key] = {**props[key], "maximum": limit}
        if path == "/v1/chat/completions" and apps:  # an app answers the last user message
            user = {"type": "object", "required": ["role", "content"],
                    "properties": {"role": {"const": "user"}, "content": NON_BLANK}}  # fmt: skip
            body(path)["allOf"] = [
                *body(path).get("allOf", []),
                {
                    "if": {"properties": {"model": {"enum": apps}}, "required": ["model"]},
                    "then": {"properties": {"messages": {"contains": user}}},
                },
            ]
        if path == "/v1/embeddings" and state.embedder is not None:
            props["dimensions"] = {"type": ["integer", "null"], "enum": [state.embedder.dim, None]}
        if path == "/v1/completions" and state.llm is not None:
            props["prompt"] = prompt_schema(
                state.llm.model.config.vocab_size, state.llm.max_model_len
            )


def prompt_schema(vocab_size: int, max_len: int) -> dict[str, Any]:
    """A completion prompt: text, texts, token ids or lists of token ids, none empty."""
    ids = {"type": "array", "minItems": 1, "maxItems": max_len - 1,
           "items": {"type": "integer", "minimum": 0, "maximum": vocab_size - 1}}  # fmt: skip
    text = PROMPT_TEXT
    return {
        "description": "a string, a list of strings, token ids, or a list of token-id lists "
        "(one choice each)",
        "oneOf": [
            text,
            {"type": "array", "minItems": 1, "items": text},
            ids,
            {"type": "array", "minItems": 1, "items": ids},
        ],
    }


def nullable_optionals(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``null`` allowed for every optional property, at every depth: the server
    reads a null optional field as absent (as OpenAI's API does)."""
    schema = dict(schema)
    required = set(schema.get("required", ()))
    if "properties" in schema:
        schema["properties"] = {
            name: nullable_optionals(prop if name in required else _or_null(prop))
            for name, prop in schema["properties"].items()
        }
    for key in ("items", "then"):
        if isinstance(schema.get(key), dict):
            schema[key] = nullable_optionals(schema[key])
    for key in ("oneOf", "anyOf"):
        if key in schema:
            schema[key] = [nullable_optionals(s) for s in schema[key]]
    return schema


def _or_null(prop: dict[str, Any]) -> dict[str, Any]:
    prop = dict(prop)
    if "const" in prop:
        prop = {**{k: v for k, v in prop.items() if k != "const"}, "enum": [prop["const"]]}
    if "enum" in prop:
        prop["enum"] = list(dict.fromkeys([*prop["enum"], None]))
    if "type" in prop:
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        prop["type"] = list(dict.fromkeys([*types, "null"]))
    elif "oneOf" in prop and {"type": "null"} not in prop["oneOf"]:
        prop["oneOf"] = [*prop["oneOf"], {"type": "null"}]
    return prop
