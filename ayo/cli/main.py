"""The command line, ``python -m ayo`` (or ``ayo``):

- ``python -m ayo plan APP [--no-optimize] [--format json|dot|svg|png] [--output FILE]``
- ``python -m ayo run APP --input key=value ... [--no-optimize] [--trace FILE] [--json]``
- ``python -m ayo ingest PATH --collection NAME [--data-dir DIR] ...`` (``ayo/cli/ingest.py``)
- ``python -m ayo profile [--dtype auto] [--weights auto] [--threads N] [--data-dir DIR] [--collection wiki]``
- ``python -m ayo demo``: every compute kernel against its torch reference (``ayo/cli/demo.py``)

The server has its own, ``python -m ayo.server``; a loopback Ray cluster ``python -m ayo.cluster``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ayo.apps import APPS, get_app
from ayo.cli.run import add_run_parser
from ayo.engines.llm.formats import WEIGHT_FORMATS
from ayo.runtime.defaults import DEFAULT_RESOURCES, default_tokenizer
from ayo.runtime.plan_cache import PlanCache
from ayo.scheduler import ExecutionError, PlanError
from ayo.scheduler.ir.render import plan_to_dot, plan_to_json, render_with_dot
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
    # the plan the server runs with the default engines: priced with the LLM's tokenizer, the
    # judge on the LLM
    plans = PlanCache(tokenizer=default_tokenizer(), resources=DEFAULT_RESOURCES)
    plan = plans.get(get_app(args.app), shape, optimize=not args.no_optimize)
    if args.format == "json":
        data = (json.dumps(plan_to_json(plan), indent=2) + "\n").encode()
    elif args.format == "dot":
        data = plan_to_dot(plan).encode()
    else:
        data = render_with_dot(plan_to_dot(plan), args.format)
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
    prof = sub.add_parser("profile", help="measure the embedded engines (LLM, embedder, "
                          "reranker, indexes) on this machine and print their latency models "
                          "beside the constants")  # fmt: skip
    prof.add_argument("--model", default="smollm2-135m-instruct")
    prof.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    prof.add_argument("--weights", choices=("auto", *WEIGHT_FORMATS),
                      default="auto")  # fmt: skip
    prof.add_argument("--threads", type=int, default=None, help="the LLM's torch threads")
    prof.add_argument("--data-dir", default=None, help="where the profile is stored (default "
                      "$AYO_DATA_DIR, else ~/.cache/ayo)")  # fmt: skip
    prof.add_argument("--collection", default="wiki", help="the collection the indexes are "
                      "measured on (left out when it is not ingested)")  # fmt: skip
    prof.set_defaults(func=cmd_profile)
    ingest = sub.add_parser("ingest", add_help=False, help="ingest documents (the packaged wiki, "
                            "or a file/folder of .txt/.md/.jsonl) into a collection of a data "
                            "directory; `python -m ayo ingest --help` for its options")  # fmt: skip
    ingest.add_argument("args", nargs=argparse.REMAINDER)
    ingest.set_defaults(func=cmd_ingest)
    demo = sub.add_parser("demo", help="check every compute kernel end to end against its torch "
                          "reference (Triton's interpreter on a CPU)")  # fmt: skip
    demo.set_defaults(func=cmd_demo)
    return parser


def cmd_ingest(args: argparse.Namespace) -> int:
    from ayo.cli.ingest import main as ingest_main

    return ingest_main(args.args)


def cmd_demo(args: argparse.Namespace) -> int:
    from ayo.cli.demo import main as demo_main

    return demo_main()


def cmd_profile(args: argparse.Namespace) -> int:
    import asyncio
    import os
    from pathlib import Path

    import torch

    from ayo.runtime.corpus import default_data_dir
    from ayo.runtime.profiling import (
        PROFILE_HEADERS,
        profile_default_engines,
        profile_path,
        profile_rows,
    )
    from ayo.scheduler.profiles.profiler import save_profiles

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data_dir = Path(args.data_dir or default_data_dir())
    profiles, samples, dtype = asyncio.run(
        profile_default_engines(
            args.model, args.dtype, args.threads, data_dir, args.collection, args.weights
        )
    )
    threads = args.threads or torch.get_num_threads()
    path = profile_path(data_dir, args.model, dtype, threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_profiles(path, profiles)
    for name, rows in samples.items():
        shapes = ", ".join(f"{s.items}x{s.tokens_per_item}: {s.latency_ms:.1f}" for s in rows)
        print(f"# {name} samples (items x tokens: ms): {shapes}")
    print(f"# {args.model} {dtype}, {threads} LLM threads; saved {path}")
    widths = [max(len(str(r[i])) for r in [PROFILE_HEADERS, *profile_rows(profiles)]) for i in
              range(len(PROFILE_HEADERS))]  # fmt: skip
    for row in [PROFILE_HEADERS, *profile_rows(profiles)]:
        print(" | ".join(str(v).rjust(w) for v, w in zip(row, widths)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ingest"]:
        # straight to its own parser: argparse's REMAINDER never takes a first "-..." argument,
        # so `ayo ingest --help` would be refused here
        return cmd_ingest(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (PlanError, ExecutionError, RuntimeError, KeyError, ValueError, OSError) as exc:
        print(f"ayo {args.command}: error: {exc}", file=sys.stderr)
        return 2
