"""One named collection of vectors: the vectors themselves, their int64 ids, a faiss index.

Rows are append-only: row ``r`` holds ``ids[r]`` and ``vectors[r]``, and the faiss index labels
are rows. Removing an id tombstones its row (searches exclude it with a faiss ``IDSelector``);
when tombstones pass ``rebuild_ratio`` of the rows, the collection compacts and rebuilds.
Kinds: ``exact`` (flat inner product), ``hnsw`` (HNSW flat), ``ivf`` (IVF flat, trained on the
vectors present when it is built). Not thread-safe: :class:`VectorIndex` holds the lock. The faiss index is built lazily.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DimensionMismatch, DuplicateId, InvalidRequest

logger = logging.getLogger(__name__)

KINDS = ("auto", "exact", "hnsw", "ivf")


@dataclass(frozen=True)
class IndexConfig:
    """How collections are indexed (inner product; store unit vectors for cosine).

    Attributes:
        kind: ``auto`` (exact below ``auto_threshold`` vectors, HNSW from there), or a fixed kind.
        auto_threshold: vectors at which an ``auto`` collection switches from exact to HNSW.
        hnsw_m / hnsw_ef_construction / hnsw_ef_search: HNSW graph degree and beam widths.
        ivf_nlist: IVF lists; None: ``4 * sqrt(n)`` at build time. ivf_nprobe: lists searched.
        rebuild_ratio: fraction of removed rows that triggers a compaction.
        device: ``auto`` (GPU when available, see VectorIndex), ``cpu``.
    """

    kind: str = "auto"
    auto_threshold: int = 50_000
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    ivf_nlist: int | None = None
    ivf_nprobe: int = 16
    rebuild_ratio: float = 0.25
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"index kind must be one of {KINDS}, got {self.kind!r}")
        if self.device not in ("auto", "cpu"):
            raise ValueError(f"device must be 'auto' or 'cpu', got {self.device!r}")
        for name in ("auto_threshold", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search",
                     "ivf_nprobe"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.rebuild_ratio <= 1:
            raise ValueError(f"rebuild_ratio must be in (0, 1], got {self.rebuild_ratio}")


class VectorCollection:
    """Vectors + ids + a faiss index over them (see the module docstring)."""

    def __init__(self, name: str, dim: int, config: IndexConfig) -> None:
        if dim < 1:
            raise InvalidRequest(f"dimension must be >= 1, got {dim}")
        self.name, self.dim, self.config = name, dim, config
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._size = 0  # rows used (live + dead)
        self._row_of: dict[int, int] = {}
        self._dead: set[int] = set()
        self._index = None  # faiss index over rows [0, _size)
        self.kind = self._kind_for(0)
        self._built_on = 0  # rows when the index was last built (IVF retrains as it grows)
        self.version = 0  # bumped on every mutation (GPU copies use it)

    # -- size / kind ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._row_of)

    def _kind_for(self, n: int) -> str:
        if self.config.kind != "auto":
            return self.config.kind
        return "hnsw" if n >= self.config.auto_threshold else "exact"

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids [n], vectors [n, dim]) of the live rows, in row order (copies)."""
        rows = self._live_rows()
        return self._ids[rows].copy(), self._vectors[rows].copy()

    def _live_rows(self) -> np.ndarray:
        rows = np.arange(self._size)
        if self._dead:
            rows = rows[~np.isin(rows, np.fromiter(self._dead, np.int64))]
        return rows

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of ``ids`` ([n, dim]); raises ``InvalidRequest`` for an unknown id."""
        missing = [int(i) for i in ids if int(i) not in self._row_of]
        if missing:
            raise InvalidRequest(f"collection {self.name!r} has no ids {missing[:5]}")
        return self._vectors[[self._row_of[int(i)] for i in ids]].copy()

    def contains(self, ids: np.ndarray) -> np.ndarray:
        return np.array([int(i) in self._row_of for i in ids], dtype=bool)

    # -- mutation -------------------------------------------------------------------------------
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Append vectors; all-or-nothing on errors."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise DimensionMismatch(
                f"collection {self.name!r} holds {self.dim}-d vectors, got shape {vectors.shape}"
            )
        if len(ids) != len(vectors):
            raise InvalidRequest(f"{len(ids)} ids for {len(vectors)} vectors")
        if len(np.unique(ids)) != len(ids):
            raise DuplicateId(f"the same id appears twice in one add to {self.name!r}")
        clash = [int(i) for i in ids if int(i) in self._row_of]
        if clash:
            raise DuplicateId(f"ids already in {self.name!r}: {clash[:5]}")
        if not np.isfinite(vectors).all():
            raise InvalidRequest("vectors contain NaN or infinity")
        self._grow(self._size + len(ids))
        start = self._size
        self._vectors[start : start + len(ids)] = vectors
        self._ids[start : start + len(ids)] = ids
        self._row_of.update((int(i), start + r) for r, i in enumerate(ids))
        self._size += len(ids)
        self.version += 1
        stale_ivf = self.kind == "ivf" and self._size > 2 * max(self._built_on, 39)
        if self._kind_for(len(self)) != self.kind or stale_ivf:
            self._index = None  # rebuilt (as the new kind) by the next search or save
            self.kind = self._kind_for(len(self))
        elif self._index is not None:
            self._index.add(vectors)

    def remove(self, ids: np.ndarray) -> int:
        """Remove the ids present; returns how many were."""
        removed = 0
        for i in np.asarray(ids, dtype=np.int64).reshape(-1):
            row = self._row_of.pop(int(i), None)
            if row is not None:
                self._dead.add(row)
                removed += 1
        if removed:
            self.version += 1
            if len(self._dead) > self.config.rebuild_ratio * max(self._size, 1):
                self._compact()
                self._index = None
        return removed

    def _grow(self, need: int) -> None:
        if need <= len(self._ids):
            return
        cap = max(need, 2 * len(self._ids), 1024)
        vectors = np.zeros((cap, self.dim), dtype=np.float32)
        vectors[: self._size] = self._vectors[: self._size]
        ids = np.zeros(cap, dtype=np.int64)
        ids[: self._size] = self._ids[: self._size]
        self._vectors, self._ids = vectors, ids

    def _compact(self) -> None:
        ids, vectors = self.live()
        self._vectors, self._ids, self._size = vectors, ids, len(ids)
        self._row_of = {int(i): r for r, i in enumerate(ids)}
        self._dead.clear()
        self.kind = self._kind_for(len(ids))
        self.version += 1

    def rebuild(self) -> None:
        """Compact away removed rows and build the faiss index for the current size.

        Indexes are built lazily (first search or save after a kind change or compaction), so
        faiss is only needed by the faiss backends.
        """
        import faiss

        self._compact()
        ids, vectors = self._ids, self._vectors
        if self.kind == "exact":
            index = faiss.IndexFlatIP(self.dim)
        elif self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.config.hnsw_ef_construction
        else:
            nlist = self.config.ivf_nlist or max(1, int(4 * math.sqrt(max(len(ids), 1))))
            nlist = max(1, min(nlist, len(ids) // 39 or 1))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, nlist,
                                       faiss.METRIC_INNER_PRODUCT)  # fmt: skip
            index.train(vectors if len(ids) else np.zeros((1, self.dim), np.float32))
        if len(ids):
            index.add(vectors)
        self._index, self._built_on = index, len(ids)
        self.version += 1
        logger.debug("collection %s: %s index over %d vectors", self.name, self.kind, len(ids))

    # -- search ---------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [Q, k], ids int64 [Q, k]); missing slots are id -1, score -inf."""
        import faiss

        if self._index is None:
            self.rebuild()
        kind_params = {
            "exact": faiss.SearchParameters,
            "hnsw": faiss.SearchParametersHNSW,
            "ivf": faiss.SearchParametersIVF,
        }
        params = kind_params[self.kind]()
        if self.kind == "hnsw":
            params.efSearch = max(self.config.hnsw_ef_search, k)
        elif self.kind == "ivf":
            params.nprobe = self.config.ivf_nprobe
        if self._dead:
            dead = np.fromiter(self._dead, dtype=np.int64)
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(dead))
            params.sel = selector
        scores, rows = self._index.search(queries, k, params=params)
        return self._to_ids(scores, rows)

    def _to_ids(self, scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(self._ids) == 0:  # an empty (or emptied) collection: every slot is missing
            return np.full(rows.shape, -np.inf, np.float32), np.full(rows.shape, -1, np.int64)
        ids = np.where(rows >= 0, self._ids[np.clip(rows, 0, None)], -1)
        scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
        return scores, ids.astype(np.int64)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """Write ``vectors.npy``, ``ids.npy``, ``index.faiss``, then ``meta.json`` last."""
        import faiss

        if self._dead or self._index is None:
            self.rebuild()
        folder.mkdir(parents=True, exist_ok=True)
        _atomic(folder / "vectors.npy", lambda p: np.save(p, self._vectors[: self._size]))
        _atomic(folder / "ids.npy", lambda p: np.save(p, self._ids[: self._size]))
        _atomic(folder / "index.faiss", lambda p: faiss.write_index(self._index, str(p)))
        meta = {"name": self.name, "dim": self.dim, "kind": self.kind, "count": len(self)}
        _atomic(folder / "meta.json", lambda p: p.write_text(json.dumps(meta)))

    @classmethod
    def load(cls, folder: Path, config: IndexConfig) -> VectorCollection:
        """Read a saved collection; the index is rebuilt if its file is stale or unreadable."""
        import faiss

        meta = json.loads((folder / "meta.json").read_text())
        coll = cls(meta["name"], int(meta["dim"]), config)
        ids = np.load(folder / "ids.npy")
        vectors = np.load(folder / "vectors.npy")
        if len(ids) != meta["count"] or vectors.shape != (len(ids), coll.dim):
            raise ValueError(f"{folder}: files disagree with meta.json")
        coll._vectors, coll._ids, coll._size = vectors, ids, len(ids)
        coll._row_of = {int(i): r for r, i in enumerate(ids)}
        try:
            index = faiss.read_index(str(folder / "index.faiss"))
            fresh = index.ntotal == len(ids) and meta["kind"] == coll._kind_for(len(ids))
        except RuntimeError:
            fresh = False
        if fresh:
            coll._index, coll.kind, coll._built_on = index, meta["kind"], len(ids)
        else:
            coll.rebuild()
        return coll


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp" + (path.suffix if path.suffix == ".npy" else ""))
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
