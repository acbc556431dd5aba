"""The data directory and the documents that go into it: where it is (``default_data_dir``),
the documents of a corpus (``iter_documents``: the packaged wiki, or a file/folder of
.txt/.md/.jsonl) and a bulk ingest into a store (``ingest_all``). ``python -m ayo ingest`` is
its command line (``ayo/cli/ingest.py``), the server's first start its other user.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ayo.engines import Document, RetrievalStore
from ayo.engines.corpus import load_wiki

logger = logging.getLogger(__name__)

SUFFIXES = (".txt", ".md", ".jsonl")


def default_data_dir() -> Path:
    """``$AYO_DATA_DIR``, else ``$XDG_CACHE_HOME/ayo`` (``~/.cache/ayo``): the server's default
    too, so ``python -m ayo ingest`` and ``python -m ayo.server`` share one data directory."""
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
