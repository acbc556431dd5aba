"""Vector index engine: named collections of int64-id'd vectors, batched inner-product search.

Searches from many queries are batched by the worker: all requests for one collection in a
round become one ``[sum Q, D]`` search. Mutations (``add``/``remove``) are synchronous and
take the same lock; call them from a worker thread (``asyncio.to_thread``) on the event loop.

Backends for exact collections, chosen once: faiss GPU when ``faiss.get_num_gpus() > 0``, else
``ayo.kernels.similarity_topk`` on CUDA tensors when torch sees CUDA, else faiss CPU. HNSW/IVF
collections always search on faiss CPU. Collections persist under ``data_dir/<name>/`` on
``save()``/``close()``; the document store is the source of truth and catches them up on start.
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import BatchConfig, BatchingEngine
from .errors import DimensionMismatch, InvalidRequest, UnknownCollection
from .vector_collection import IndexConfig, VectorCollection

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_collection_name(name: str) -> None:
    """Raise ``InvalidRequest`` unless ``name`` is 1-64 chars of ``[A-Za-z0-9_.-]``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequest(
            f"invalid collection name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . - "
            "starting with a letter or digit"
        )


@dataclass(frozen=True)
class SearchRequest:
    """``queries``: float32 ``[Q, D]`` (or ``[D]``); ``k`` neighbours per query."""

    collection: str
    queries: np.ndarray
    k: int


@dataclass(frozen=True)
class SearchResult:
    """``ids`` int64 ``[Q, k]`` (-1 where fewer than k exist), ``scores`` float32 ``[Q, k]``."""

    ids: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class IndexedCollection:
    name: str
    dim: int
    count: int
    kind: str


def _pick_backend(config: IndexConfig) -> str:
    if config.device == "cpu":
        return "faiss-cpu"
    try:
        import faiss
    except ImportError:  # e.g. a GPU image without faiss: exact search on torch only
        faiss = None
    if faiss is not None and faiss.get_num_gpus() > 0:
        return "faiss-gpu"
    try:
        import torch
    except ImportError:
        return "faiss-cpu"
    return "torch-cuda" if torch.cuda.is_available() else "faiss-cpu"


class VectorIndex(BatchingEngine[SearchRequest, SearchResult]):
    """Named vector collections with batched search (see the module docstring)."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        config: IndexConfig | None = None,
        batch: BatchConfig | None = None,
    ) -> None:
        super().__init__("vector-index", batch)
        self.config = config or IndexConfig()
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.backend = _pick_backend(self.config)
        self._lock = threading.RLock()
        self._colls: dict[str, VectorCollection] = {}
        self._dirty: set[str] = set()
        self._gpu_cache: dict[str, tuple[int, object, np.ndarray]] = {}
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            for meta in sorted(self.data_dir.glob("*/meta.json")):
                try:
                    coll = VectorCollection.load(meta.parent, self.config)
                except (OSError, ValueError, KeyError) as err:
                    logger.warning("cannot load %s (%r); it will be rebuilt", meta.parent, err)
                    continue
                self._colls[coll.name] = coll
        logger.info("vector index: backend %s, %d collections", self.backend, len(self._colls))

    # -- collections --------------------------------------------------------------------------
    def _get(self, name: str) -> VectorCollection:
        coll = self._colls.get(name)
        if coll is None:
            raise UnknownCollection(f"unknown vector collection {name!r}")
        return coll

    def create_collection(self, name: str, dim: int, *, exist_ok: bool = False) -> None:
        """Create an empty collection of ``dim``-d vectors."""
        check_collection_name(name)
        with self._lock:
            if name in self._colls:
                if not exist_ok:
                    raise InvalidRequest(f"vector collection {name!r} already exists")
                if self._colls[name].dim != dim:
                    raise DimensionMismatch(
                        f"collection {name!r} exists with dim {self._colls[name].dim}, not {dim}"
                    )
                return
            self._colls[name] = VectorCollection(name, dim, self.config)
            self._dirty.add(name)

    def drop_collection(self, name: str) -> None:
        with self._lock:
            self._get(name)
            del self._colls[name]
            self._dirty.discard(name)
            self._gpu_cache.pop(name, None)
            if self.data_dir is not None and (self.data_dir / name).exists():
                shutil.rmtree(self.data_dir / name)

    def has_collection(self, name: str) -> bool:
        return name in self._colls

    def collections(self) -> list[IndexedCollection]:
        with self._lock:
            return [IndexedCollection(c.name, c.dim, len(c), c.kind) for c in self._colls.values()]

    def count(self, name: str) -> int:
        with self._lock:
            return len(self._get(name))

    # -- mutation (synchronous) ---------------------------------------------------------------
    def add(self, name: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under int64 ids. Raises UnknownCollection, DimensionMismatch, DuplicateId."""
        with self._lock:
            self._get(name).add(ids, vectors)
            self._dirty.add(name)

    def remove(self, name: str, ids: np.ndarray) -> int:
        """Remove ids (absent ones are ignored); returns how many were removed."""
        with self._lock:
            removed = self._get(name).remove(ids)
            if removed:
                self._dirty.add(name)
            return removed

    def ids(self, name: str) -> np.ndarray:
        with self._lock:
            return self._get(name).live()[0]

    def get(self, name: str, ids: np.ndarray) -> np.ndarray:
        with self._lock:
            return self._get(name).get(np.asarray(ids, dtype=np.int64))

    def save(self) -> None:
        """Persist every collection changed since the last save (no-op without data_dir)."""
        if self.data_dir is None:
            return
        with self._lock:
            for name in sorted(self._dirty):
                self._colls[name].save(self.data_dir / name)
            self._dirty.clear()

    def close(self, timeout: float | None = 10.0) -> None:
        super().close(timeout)
        self.save()

    # -- search -------------------------------------------------------------------------------
    async def search(self, collection: str, queries: np.ndarray, k: int) -> SearchResult:
        """Top-k by inner product for each query vector; batched with other callers'."""
        return await self.submit(SearchRequest(collection, _as_queries(queries), k))

    def search_sync(self, collection: str, queries: np.ndarray, k: int) -> SearchResult:
        request = SearchRequest(collection, _as_queries(queries), k)
        self.validate(request)
        result = self.execute([request])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def validate(self, request: SearchRequest) -> None:
        coll = self._get(request.collection)
        q = request.queries
        if q.ndim != 2 or q.shape[0] == 0:
            raise InvalidRequest(f"queries must be [Q, D] with Q >= 1, got shape {q.shape}")
        if q.shape[1] != coll.dim:
            raise DimensionMismatch(
                f"collection {request.collection!r} holds {coll.dim}-d vectors, "
                f"queries are {q.shape[1]}-d"
            )
        if not isinstance(request.k, int) or request.k < 1:
            raise InvalidRequest(f"k must be a positive int, got {request.k!r}")
        if not np.isfinite(q).all():
            raise InvalidRequest("query vectors contain NaN or infinity")

    def run_batch(self, requests: list[SearchRequest]) -> list[SearchResult | BaseException]:
        results: list[SearchResult | BaseException] = [None] * len(requests)  # type: ignore[list-item]
        groups: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[r.collection].append(i)
        for name, members in groups.items():
            try:
                self._validate_all(members, requests)
                queries = np.concatenate([requests[i].queries for i in members])
                k = max(requests[i].k for i in members)
                scores, ids = self._search(name, queries, k)
            except InvalidRequest as err:
                for i in members:
                    results[i] = err
                continue
            row = 0
            for i in members:
                q, kk = len(requests[i].queries), requests[i].k
                results[i] = SearchResult(ids[row : row + q, :kk], scores[row : row + q, :kk])
                row += q
        return results

    def _validate_all(self, members: list[int], requests: list[SearchRequest]) -> None:
        for i in members:  # the collection may have been dropped or recreated since submit
            self.validate(requests[i])

    def _search(self, name: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            coll = self._get(name)
            if self.backend == "faiss-cpu" or coll.kind != "exact" or len(coll) == 0:
                return coll.search(queries, k)
            return self._search_gpu(coll, queries, k)

    def _search_gpu(
        self, coll: VectorCollection, queries: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        cached = self._gpu_cache.get(coll.name)
        if cached is None or cached[0] != coll.version:
            ids, vectors = coll.live()
            if self.backend == "faiss-gpu":
                import faiss

                resources = faiss.StandardGpuResources()
                flat = faiss.IndexFlatIP(coll.dim)
                flat.add(vectors)
                device_index: object = (faiss.index_cpu_to_gpu(resources, 0, flat), resources)
            else:
                import torch

                device_index = torch.from_numpy(vectors).cuda()
            cached = (coll.version, device_index, ids)
            self._gpu_cache[coll.name] = cached
        _, device_index, ids = cached
        kk = min(k, len(ids))
        if self.backend == "faiss-gpu":
            scores, rows = device_index[0].search(queries, kk)  # type: ignore[index]
        else:
            import torch

            from ayo.kernels import similarity_topk

            s, r = similarity_topk(torch.from_numpy(queries).cuda(), device_index, kk)
            scores, rows = s.float().cpu().numpy(), r.cpu().numpy()
        out_ids = np.full((len(queries), k), -1, dtype=np.int64)
        out_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        out_ids[:, :kk] = np.where(rows >= 0, ids[np.clip(rows, 0, None)], -1)
        out_scores[:, :kk] = scores
        return out_scores, out_ids


def _as_queries(queries: np.ndarray) -> np.ndarray:
    q = np.ascontiguousarray(queries, dtype=np.float32)
    return q[None, :] if q.ndim == 1 else q
