"""``GET /v1/apps``, ``GET /v1/apps/{name}/plan.svg``, ``POST /v1/apps/{name}/query``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ayo.scheduler import PortType, plan_to_json
from ayo.server.errors import (
    ApiError,
    bad_request,
    field,
    not_found,
    number_in,
    read_json,
    reject_unknown,
)
from ayo.server.mapping import to_api_error
from ayo.server.replies import dumps, result_json
from ayo.server.sse import stream_query
from ayo.server.state import STATE, ServerState

JSON_TYPES = {PortType.TEXT: "string", PortType.TEXT_LIST: "array of strings"}


@dataclass(frozen=True)
class AppInputSpec:
    name: str
    type: str  # "string", "array of strings", ...
    required: bool

    def check(self, value: Any) -> None:
        """400 naming the input when ``value`` has the wrong JSON type or holds no text."""
        if self.type == "string" and not (isinstance(value, str) and value.strip()):
            raise bad_request(f"input {self.name!r} must be a non-blank string")
        if self.type == "array of strings" and not (
            isinstance(value, list)
            and value
            and all(isinstance(v, str) and v.strip() for v in value)
        ):
            raise bad_request(f"input {self.name!r} must be a non-empty array of non-blank strings")


def app_inputs(state: ServerState, name: str) -> list[AppInputSpec]:
    """The inputs of app ``name`` with their types (404 for an unknown app)."""
    from ayo.apps import AppTemplate
    from ayo.workflow import InputShape

    if name not in state.app.workflows:
        raise not_found(f"unknown app {name!r}; apps: {state.app.workflows}")
    target = state.app.workflow(name)
    if isinstance(target, AppTemplate):
        names = target.required + target.optional
        ports = target.workflow(InputShape.from_sizes(**{n: 1 for n in names})).inputs
        required = set(target.required)
    else:
        ports = target.inputs
        required = {p.name for p in ports}
    return [
        AppInputSpec(p.name, JSON_TYPES.get(p.type, p.type.value), p.name in required)
        for p in ports
    ]


EXAMPLE_LIST_LEN = 16  # as ``python -m ayo plan`` (its --documents default)


def example_inputs(inputs: list[AppInputSpec]) -> dict[str, Any]:
    """Inputs of a query bringing only the required inputs, lists of 16 items (for plans)."""
    return {
        i.name: ([""] * EXAMPLE_LIST_LEN if i.type.startswith("array") else "")
        for i in inputs
        if i.required
    }


def _optimize_param(request: web.Request) -> bool:
    raw = request.query.get("optimize", "true").lower()
    if raw not in ("true", "false", "1", "0"):
        raise bad_request(f"query parameter 'optimize' must be true or false, got {raw!r}")
    return raw in ("true", "1")


async def list_apps(request: web.Request) -> web.Response:
    """Each app with its inputs and its optimized plan (for a query of the required inputs)."""
    state = request.app[STATE]
    optimize = _optimize_param(request)
    apps = []
    for name in state.app.workflows:
        inputs = app_inputs(state, name)
        target = state.app.workflow(name)
        plan = state.app.plan(name, example_inputs(inputs), optimize=optimize)
        apps.append(
            {
                "name": name,
                "description": getattr(target, "description", ""),
                "model": f"app:{name}",
                "inputs": [vars(i) for i in inputs],
                "plan": plan_to_json(plan),
            }
        )
    return web.json_response({"apps": apps})


async def plan_svg(request: web.Request) -> web.Response:
    """The plan drawn by Graphviz (501 when ``dot`` is not installed)."""
    from ayo.scheduler.ir.render import plan_to_dot, render_with_dot

    state = request.app[STATE]
    name = request.match_info["name"]
    inputs = app_inputs(state, name)
    plan = state.app.plan(name, example_inputs(inputs), optimize=_optimize_param(request))
    try:
        svg = await asyncio.to_thread(render_with_dot, plan_to_dot(plan), "svg")
    except RuntimeError as exc:
        raise ApiError(501, "not_implemented", str(exc)) from None
    return web.Response(body=svg, content_type="image/svg+xml")


@dataclass(frozen=True)
class QueryRequest:
    """A parsed, validated body of ``POST /v1/apps/{name}/query``."""

    app: str
    inputs: dict[str, Any]
    optimize: bool
    stream: bool
    trace: bool
    deadline: float

    @classmethod
    def parse(cls, state: ServerState, name: str, body: dict[str, Any]) -> QueryRequest:
        specs = app_inputs(state, name)  # 404 first
        reject_unknown(body, {"inputs", "optimize", "stream", "trace", "deadline"}, "the body")
        inputs = field(body, "inputs", dict, required=True)
        known = {s.name: s for s in specs}
        unknown = sorted(set(inputs) - set(known))
        if unknown:
            raise bad_request(f"app {name!r} has no inputs {unknown}; inputs: {sorted(known)}")
        missing = [s.name for s in specs if s.required and inputs.get(s.name) is None]
        if missing:
            raise bad_request(f"app {name!r} needs inputs {missing}")
        for key, value in inputs.items():
            if value is not None:
                known[key].check(value)
        deadline = field(body, "deadline", float, None)
        number_in(deadline, "deadline", 1e-3)
        if deadline is None or deadline > state.config.query_timeout_s:
            deadline = state.config.query_timeout_s
        return cls(
            app=name,
            inputs=inputs,
            optimize=field(body, "optimize", bool, True),
            stream=field(body, "stream", bool, False),
            trace=field(body, "trace", bool, False),
            deadline=deadline,
        )


async def query(request: web.Request) -> web.StreamResponse:
    """Run app ``name``: JSON result, or server-sent events when ``stream`` is true."""
    state = request.app[STATE]
    body = await read_json(request)
    q = QueryRequest.parse(state, request.match_info["name"], body)
    if q.stream:
        return await stream_query(request, state, q)
    try:
        result = await state.app.run(q.app, q.inputs, optimize=q.optimize, deadline=q.deadline)
    except Exception as exc:
        raise to_api_error(exc) from None
    return web.json_response(result_json(result, q.trace), dumps=dumps)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/apps", list_apps)
    app.router.add_get("/v1/apps/{name}/plan.svg", plan_svg)
    app.router.add_post("/v1/apps/{name}/query", query)
