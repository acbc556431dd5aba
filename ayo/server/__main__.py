"""``python -m ayo.server``: serve Ayo's apps, the OpenAI-compatible API and ingestion over HTTP.

    python -m ayo.server                             # 127.0.0.1:8000, embedded models, wiki corpus
    python -m ayo.server --port 9000 --corpus none --data-dir ./ayo-data
    python -m ayo.server --host 0.0.0.0 --api-key "$KEY"
    python -m ayo.server --config server.json --port 8001   # flags override the file

The first start ingests the wiki corpus into collection ``wiki`` (progress on stderr) before the
port opens; later starts find it stored and embed nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence

from ayo.engines.llm.formats import WEIGHT_FORMATS
from ayo.server.config import ServerConfig

log = logging.getLogger("ayo.server")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ayo.server", description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--host", help="address to bind (default 127.0.0.1; beyond loopback needs --api-key)")
    a("--port", type=int, help="port (default 8000; 0 picks a free one, logged at start)")
    a("--data-dir", help="data directory (default $AYO_DATA_DIR or $XDG_CACHE_HOME/ayo)")
    a("--model", help="LLM: smollm2-135m-instruct (default), a HF folder or a .gguf file")
    a("--dtype", choices=("auto", "float32", "bfloat16"),
      help="LLM activations: auto (default: with --weights auto, the format measured fastest "
      "on this CPU), float32 (with fp32 weights equal to transformers token for token) or "
      "bfloat16")  # fmt: skip
    a("--weights", choices=("auto", *WEIGHT_FORMATS),
      help="LLM matmul weights: auto (default), fp32, bf16, int8, int4 (groups of 32; a "
      "GGUF's Q4_1 blocks as they are)")  # fmt: skip
    a("--embedder", help="embedder: all-minilm-l6-v2 (default) or a sentence-transformers folder")
    a("--config", help="JSON file whose keys mirror these options (and the limits below)")
    a("--api-key", help="require 'Authorization: Bearer KEY' (default: $AYO_API_KEY)")
    a("--corpus", help="corpus ingested at start: wiki (default), none, or a file/folder")
    a("--corpus-limit", type=int, help="ingest only the first N corpus documents")
    a("--collection", help="collection of the corpus, searched by the apps (default wiki)")
    a("--max-body-mb", type=float, help="largest request body in MiB (default 16)")
    a("--max-document-mb", type=float, help="largest ingested document in MiB (default 16)")
    a("--shutdown-timeout-s", type=float,
      help="on SIGTERM, seconds requests in flight may take before they are cancelled (default 10)")  # fmt: skip
    a("--max-concurrent-queries", type=int,
      help="queries in flight at once, OpenAI requests included (default 64); more wait")  # fmt: skip
    a("--max-queued-queries", type=int,
      help="queries that may wait for a slot before 429 (default 1024)")  # fmt: skip
    a("--query-timeout-s", type=float, help="deadline of a query that sets none (default 300)")
    a("--max-tokens-limit", type=int, help="largest max_tokens a request may ask (default 2048)")
    a("--log-level", help="DEBUG, INFO (default), WARNING or ERROR")
    a("--no-profile-engines", dest="profile_engines", action="store_false", default=None,
      help="at a first start, skip measuring the engines (the plans then use the constants)")  # fmt: skip
    a("--ray-address", help="a Ray cluster to join (HOST:6379, from `ray start --head`), for "
      "engines that --placement puts on its nodes")  # fmt: skip
    a("--placement", type=_json_object, help="JSON: where the apps' engines run, e.g. "
      "'{\"llm\": [\"local\", {\"resources\": {\"worker\": 0.5}}]}' (see README)")  # fmt: skip
    a("--no-gc-tuning", dest="gc_tuning", action="store_false", default=None,
      help="keep CPython's GC defaults (default: freeze the startup heap, fewer young GCs)")  # fmt: skip
    return p


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def load_config(args: argparse.Namespace) -> ServerConfig:
    """File options, then the environment's API key, then flags (the last wins). Raises
    ValueError with the fix."""
    options = ServerConfig.from_file(args.config) if args.config else {}
    if os.environ.get("AYO_API_KEY") and "api_key" not in options:
        options["api_key"] = os.environ["AYO_API_KEY"]
    for key, value in vars(args).items():
        if key != "config" and value is not None:
            options[key] = value
    config = ServerConfig.build(**options)
    config.check_exposure()
    return config


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("faiss").setLevel(logging.WARNING)
    log.info("config: %s", config.public())
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
        log.info("uvloop is not installed; using asyncio's default loop")
    else:
        runner = uvloop.run
    from ayo.server.serve import serve

    try:
        runner(serve(config))
    except RuntimeError as exc:  # a missing model or package: the message says which
        log.error("%s", exc)
        return 1
    except OSError as exc:  # the port is taken, the data dir is not writable
        log.error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
