"""``python -m ayo run APP --input key=value ... [--no-optimize] [--trace FILE] [--json]``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from ayo.apps import APPS
from ayo.scheduler import PortType
from ayo.workflow import InputShape

_LIST_TYPES = (PortType.TEXT_LIST,)


def parse_inputs(app: str, pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (``key=@file`` reads the file) into query inputs; a list input of the
    app collects every value given for its key."""
    raw: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--input takes key=value, got {pair!r}")
        if value.startswith("@"):
            value = Path(value[1:]).read_text()
        raw.setdefault(key, []).append(value)
    template = APPS.get(app)
    types = {}
    if template is not None:
        workflow = template.workflow(InputShape.from_sizes(**{k: 1 for k in raw}))
        types = {p.name: p.type for p in workflow.inputs}
    inputs: dict[str, Any] = {}
    for key, values in raw.items():
        if types.get(key) in _LIST_TYPES:
            inputs[key] = values
        elif len(values) > 1:
            raise ValueError(f"input {key!r} takes one value, got {len(values)}")
        else:
            inputs[key] = values[0]
    return inputs


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


async def _run(args: argparse.Namespace) -> int:
    from ayo.runtime.app import App

    inputs = parse_inputs(args.app, args.input)
    if args.engines == "fake":
        app = App.fake()
    else:
        app = App.default(args.data_dir, args.collection)
    async with app:
        if args.stream and not args.json:
            result = None
            async for event in app.stream(
                args.app, inputs, optimize=not args.no_optimize, deadline=args.deadline
            ):
                if event.result is None:
                    sys.stdout.write(event.delta)
                    sys.stdout.flush()
                else:
                    result = event.result
            sys.stdout.write("\n")
        else:
            result = await app.run(
                args.app, inputs, optimize=not args.no_optimize, deadline=args.deadline
            )
    assert result is not None
    if args.json:
        out = {"outputs": result.outputs, "latency_ms": round(result.latency_ms, 3)}
        print(json.dumps(out, default=_jsonable))
    elif not args.stream:
        for name, value in result.outputs.items():
            print(f"{name}: {value}")
    if not args.json:
        print(f"latency: {result.latency_ms:.1f} ms", file=sys.stderr)
    if args.trace:
        if args.trace.endswith((".png", ".svg", ".pdf")):
            result.trace.write_gantt(args.trace, title=f"{args.app} query {result.query_id}")
        else:
            result.trace.write_chrome(args.trace)
        print(f"wrote trace {args.trace} ({len(result.trace.spans)} spans)", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


def add_run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run one query of a built-in app")
    run.add_argument("app", choices=sorted(APPS), help="built-in app")
    run.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a query input (repeat for list inputs such as documents; VALUE @file reads a file)",
    )
    run.add_argument("--no-optimize", action="store_true", help="run the module-by-module plan")
    run.add_argument(
        "--trace", help="write the query's trace: Chrome JSON (.json) or Gantt (.png/.svg)"
    )
    run.add_argument("--json", action="store_true", help='print {"outputs", "latency_ms"}')
    run.add_argument("--stream", action="store_true", help="print the answer as it is written")
    run.add_argument("--deadline", type=float, default=None, help="seconds before the query fails")
    run.add_argument(
        "--engines",
        choices=("default", "fake"),
        default="default",
        help="embedded engines, or deterministic fakes (no models)",
    )
    run.add_argument("--data-dir", default=None, help="RetrievalStore folder (default engines)")
    run.add_argument(
        "--collection",
        default="wiki",
        help="stored collection searched without documents (the server's corpus: wiki)",
    )
    run.set_defaults(func=cmd_run)
