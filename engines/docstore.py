"""Document store: SQLite (WAL, synchronous=FULL) holding collections, documents, chunks, vectors.

It is the source of truth. A chunk's integer primary key *is* its vector id in the vector index
(AUTOINCREMENT, so an id is never reused after a delete). Each chunk row also keeps its float32
vector: a restart re-adds missing vectors to the index from here instead of re-embedding (the
wiki corpus costs minutes to embed on 2 cores and ~15 MB to store), and an ingest is one
transaction — documents, chunks and vectors are committed together before it is acknowledged,
so an acknowledged ingest survives ``kill -9``.

Thread-safe: one connection behind a lock; call it from worker threads on the event loop.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DuplicateId, InvalidRequest, UnknownCollection
from .records import Document, Hit

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY, dim INTEGER NOT NULL, embedder TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    key TEXT NOT NULL, title TEXT NOT NULL, text TEXT NOT NULL, metadata TEXT NOT NULL,
    UNIQUE (collection, key));
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    collection TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_collection ON chunks(collection);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id);
"""


@dataclass(frozen=True)
class StoredCollection:
    name: str
    dim: int
    embedder: str
    documents: int
    chunks: int


@dataclass(frozen=True)
class StoredDocument:
    """What one stored document received: its row id and its chunk (= vector) ids."""

    key: str
    doc_id: int
    chunk_ids: list[int]


@dataclass(frozen=True)
class DocumentInfo:
    """A stored document without its text: ``row`` orders the listing (and pages it)."""

    row: int
    key: str
    title: str
    metadata: dict
    chars: int
    chunks: int


class DocumentStore:
    """SQLite-backed documents/chunks/vectors (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- collections --------------------------------------------------------------------------
    def create_collection(self, name: str, dim: int, embedder: str) -> StoredCollection:
        """Create, or return the existing one when dim and embedder agree."""
        with self._lock:
            row = self._db.execute(
                "SELECT dim, embedder FROM collections WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO collections VALUES (?, ?, ?, ?)",
                    (name, dim, embedder, time.time()),
                )
            elif (row[0], row[1]) != (dim, embedder):
                raise InvalidRequest(
                    f"collection {name!r} was built with {row[1]} ({row[0]}-d); open it with "
                    f"that embedder or use another collection name (got {embedder}, {dim}-d)"
                )
            return self.collection(name)

    def collection(self, name: str) -> StoredCollection:
        with self._lock:
            row = self._db.execute(
                "SELECT name, dim, embedder, "
                "(SELECT COUNT(*) FROM documents d WHERE d.collection = c.name), "
                "(SELECT COUNT(*) FROM chunks k WHERE k.collection = c.name) "
                "FROM collections c WHERE name = ?",
                (name,),
            ).fetchone()
        if row is None:
            raise UnknownCollection(f"unknown collection {name!r}")
        return StoredCollection(*row)

    def collections(self) -> list[StoredCollection]:
        with self._lock:
            names = [r[0] for r in self._db.execute("SELECT name FROM collections ORDER BY name")]
        return [self.collection(n) for n in names]

    def drop_collection(self, name: str) -> None:
        self.collection(name)
        with self._lock, self._tx():
            self._db.execute("DELETE FROM chunks WHERE collection = ?", (name,))
            self._db.execute("DELETE FROM documents WHERE collection = ?", (name,))
            self._db.execute("DELETE FROM collections WHERE name = ?", (name,))

    # -- documents ----------------------------------------------------------------------------
    def existing_keys(self, collection: str, keys: list[str]) -> set[str]:
        found: set[str] = set()
        with self._lock:
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                rows = self._db.execute(
                    f"SELECT key FROM documents WHERE collection = ? AND key IN "
                    f"({','.join('?' * len(part))})",
                    (collection, *part),
                )
                found.update(r[0] for r in rows)
        return found

    def add_documents(
        self,
        collection: str,
        docs: list[Document],
        chunks: list[list[str]],
        vectors: list[np.ndarray],
    ) -> list[StoredDocument]:
        """Store documents with their chunks and chunk vectors in one committed transaction.

        Raises ``DuplicateId`` if a key exists (nothing is written), ``UnknownCollection``.
        """
        dim = self.collection(collection).dim
        out: list[StoredDocument] = []
        with self._lock, self._tx():
            try:
                for doc, texts, vecs in zip(docs, chunks, vectors):
                    if vecs.shape != (len(texts), dim):
                        raise InvalidRequest(f"document {doc.id!r}: vectors {vecs.shape} for "
                                             f"{len(texts)} chunks of dim {dim}")  # fmt: skip
                    cur = self._db.execute(
                        "INSERT INTO documents (collection, key, title, text, metadata) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (collection, doc.id, doc.title, doc.text, json.dumps(doc.metadata)),
                    )
                    doc_id = int(cur.lastrowid)
                    chunk_ids = []
                    for seq, (text, vec) in enumerate(zip(texts, vecs)):
                        cur = self._db.execute(
                            "INSERT INTO chunks (doc_id, collection, seq, text, vector) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (doc_id, collection, seq, text, vec.astype(np.float32).tobytes()),
                        )
                        chunk_ids.append(int(cur.lastrowid))
                    out.append(StoredDocument(doc.id, doc_id, chunk_ids))
            except sqlite3.IntegrityError as err:
                raise DuplicateId(
                    f"collection {collection!r}: a document id exists ({err})"
                ) from err
        return out

    def delete_documents(self, collection: str, keys: list[str]) -> list[int]:
        """Delete documents by key; returns the chunk (vector) ids that went with them."""
        with self._lock, self._tx():
            chunk_ids: list[int] = []
            for key in keys:
                rows = self._db.execute(
                    "SELECT k.id FROM chunks k JOIN documents d ON k.doc_id = d.id "
                    "WHERE d.collection = ? AND d.key = ?",
                    (collection, key),
                )
                chunk_ids += [r[0] for r in rows]
                self._db.execute(
                    "DELETE FROM documents WHERE collection = ? AND key = ?", (collection, key)
                )
        return chunk_ids

    def get_document(self, collection: str, key: str) -> Document | None:
        with self._lock:
            row = self._db.execute(
                "SELECT key, text, title, metadata FROM documents WHERE collection = ? AND key = ?",
                (collection, key),
            ).fetchone()
        return None if row is None else Document(row[0], row[1], row[2], json.loads(row[3]))

    def list_documents(
        self, collection: str, after: int = 0, limit: int = 100
    ) -> list[DocumentInfo]:
        """Up to ``limit`` documents of the collection in storage order, starting after the row
        ``after`` (0: from the first; a page's last ``row`` continues it)."""
        self.collection(collection)  # UnknownCollection
        with self._lock:
            rows = self._db.execute(
                "SELECT d.id, d.key, d.title, d.metadata, length(d.text), "
                "(SELECT count(*) FROM chunks k WHERE k.doc_id = d.id) "
                "FROM documents d WHERE d.collection = ? AND d.id > ? ORDER BY d.id LIMIT ?",
                (collection, after, limit),
            ).fetchall()
        return [DocumentInfo(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5]) for r in rows]

    # -- chunks -------------------------------------------------------------------------------
    def chunk_ids(self, collection: str) -> np.ndarray:
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM chunks WHERE collection = ? ORDER BY id", (collection,)
            ).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def chunk_vectors(
        self, collection: str, ids: np.ndarray | None = None, page: int = 4096
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pages of (ids [n], vectors float32 [n, dim]); all chunks, or those of ``ids``."""
        dim = self.collection(collection).dim
        wanted = None if ids is None else [int(i) for i in ids]
        last, pos = -1, 0
        while True:
            with self._lock:
                if wanted is None:
                    rows = self._db.execute(
                        "SELECT id, vector FROM chunks WHERE collection = ? AND id > ? "
                        "ORDER BY id LIMIT ?",
                        (collection, last, page),
                    ).fetchall()
                else:
                    part = wanted[pos : pos + 500]
                    pos += 500
                    rows = self._db.execute(
                        f"SELECT id, vector FROM chunks WHERE collection = ? AND id IN "
                        f"({','.join('?' * len(part))}) ORDER BY id",
                        (collection, *part),
                    ).fetchall() if part else []  # fmt: skip
            if not rows:
                return
            last = rows[-1][0]
            vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            yield np.array([r[0] for r in rows], dtype=np.int64), vecs.reshape(len(rows), dim)

    def chunk_texts(self, collection: str) -> tuple[np.ndarray, list[str]]:
        """(ids, "title\\ntext") of every chunk, for the keyword index."""
        with self._lock:
            rows = self._db.execute(
                "SELECT k.id, d.title, k.text FROM chunks k JOIN documents d ON k.doc_id = d.id "
                "WHERE k.collection = ? ORDER BY k.id",
                (collection,),
            ).fetchall()
        texts = [f"{title}\n{text}" if title else text for _, title, text in rows]
        return np.array([r[0] for r in rows], dtype=np.int64), texts

    def hits(self, ids: np.ndarray, scores: np.ndarray) -> list[Hit]:
        """Hits for chunk ids (ids < 0 and ids no longer stored are skipped), in input order."""
        wanted = [int(i) for i in ids if i >= 0]
        if not wanted:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT k.id, d.key, d.title, k.text, d.metadata FROM chunks k "
                f"JOIN documents d ON k.doc_id = d.id WHERE k.id IN ({','.join('?' * len(wanted))})",
                wanted,
            ).fetchall()
        by_id = {r[0]: r for r in rows}
        return [
            Hit(int(i), float(s), by_id[i][1], by_id[i][2], by_id[i][3], json.loads(by_id[i][4]))
            for i, s in zip(ids, scores)
            if int(i) in by_id
        ]

    def _tx(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (durable on return, synchronous=FULL) or ROLLBACK."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
