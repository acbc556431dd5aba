"""Command line.

- ``python -m ayo plan APP [--no-optimize] [--format json|dot|svg|png] [--output FILE]``
- ``python -m ayo run APP --input key=value ... [--no-optimize] [--trace FILE] [--json]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ayo.apps import APPS, get_app
from ayo.cli_run import add_run_parser
from ayo.plan_cache import PlanCache
from ayo.scheduler import ExecutionError, PlanError
from ayo.scheduler.render import render_with_dot
from ayo.workflow import InputShape


def _shape(app_name: str, documents: int | None) -> InputShape:
    app = get_app(app_name)
    sizes = {"question": 1}
    takes_docs = "documents" in app.required + app.optional
    if takes_docs:
        n = documents if documents is not None else 16
        if n < 0:
            raise PlanError(f"--documents must be >= 0, got {n}", node="input")
        if n > 0 or "documents" in app.required:
            sizes["documents"] = n
    elif documents:
        raise PlanError(f"app {app_name!r} takes no documents", node="input")
    return InputShape.from_sizes(**sizes)


def cmd_plan(args: argparse.Namespace) -> int:
    shape = _shape(args.app, args.documents)
    plan = PlanCache().get(get_app(args.app), shape, optimize=not args.no_optimize)
    if args.format == "json":
        data = (json.dumps(plan.to_json(), indent=2) + "\n").encode()
    elif args.format == "dot":
        data = plan.to_dot().encode()
    else:
        data = render_with_dot(plan.to_dot(), args.format)
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
        print(
            f"wrote {args.output} ({len(plan.nodes)} nodes, {len(plan.edges)} edges)",
            file=sys.stderr,
        )
    else:
        sys.stdout.buffer.write(data)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ayo", description="Ayo: optimized serving of LLM applications"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print or draw the primitive plan of a built-in app")
    plan.add_argument("app", choices=sorted(APPS), help="built-in app")
    plan.add_argument(
        "--no-optimize", action="store_true", help="the module-by-module plan, before the passes"
    )
    plan.add_argument("--format", choices=("json", "dot", "svg", "png"), default="json")
    plan.add_argument("--output", "-o", help="write here instead of stdout")
    plan.add_argument(
        "--documents",
        type=int,
        default=None,
        help="documents in the example query (default 16 for apps that take them; 0 omits an optional input)",
    )
    plan.set_defaults(func=cmd_plan)
    add_run_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (PlanError, ExecutionError, RuntimeError, KeyError, ValueError, OSError) as exc:
        print(f"ayo {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
