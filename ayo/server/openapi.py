"""The OpenAPI 3.1 document served at ``GET /openapi.json`` (written as data, one entry per route).

A test checks that every route the application registers appears here.
"""

from __future__ import annotations

from typing import Any

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


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


OBJ = {"type": "object"}
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
        "deadline": {"type": ["number", "null"], "description": "seconds"},
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
    "properties": {
        "documents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "text"],
                "properties": {
                    "id": {"type": ["string", "integer"]},
                    "text": {"type": "string"},
                    "title": {"type": "string"},
                    "metadata": OBJ,
                },
            },
        },
        "on_duplicate": {"enum": ["skip", "error"], "default": "skip"},
    },
}
OPENAI_ERRORS = (400, 401, 404, 413, 422, 429)

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
            (404, 501),
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
                    "text/event-stream": {"schema": {"type": "string"}},
                }
            },
            (400, 401, 404, 413, 422, 429, 504),
            QUERY_BODY,
            [_path_param("name")],
        )
    },
    "/v1/collections": {"get": _op("Collections with document counts", _json(OBJ), (401,))},
    "/v1/collections/{name}": {
        "get": _op("One collection's counts", _json(OBJ), (401, 404), None, [_path_param("name")])
    },
    "/v1/collections/{name}/documents": {
        "post": _op(
            "Ingest documents (chunked, embedded, indexed, stored)",
            _json(OBJ),
            (400, 401, 413),
            INGEST_BODY,
            [_path_param("name")],
        )
    },
    "/v1/collections/{name}/search": {
        "post": _op(
            "Dense search: the k best chunks per query",
            _json(OBJ),
            (400, 401, 404),
            {
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": ["string", "array"]},
                    "k": {"type": "integer", "default": 5},
                },
            },
            [_path_param("name")],
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

    paths = {p: dict(ops) for p, ops in PATHS.items()}
    try:  # the OpenAI-compatible routes describe themselves in full
        from ayo.server.openai_schema import OPENAPI_PATHS
    except ImportError:
        pass
    else:
        paths.update(OPENAPI_PATHS)
    if state is not None:
        apps = ", ".join(state.app_names)
        paths["/v1/apps/{name}/query"]["post"] = {
            **paths["/v1/apps/{name}/query"]["post"],
            "description": f"apps: {apps}",
        }
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
