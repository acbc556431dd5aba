"""The one composition root: the embedded default engines, built the same way for ``App.default``,
the server, profiling and the benchmarks.

    engines = load_default_engines(EngineOptions(data_dir="/tmp/ayo-data", dtype="float32"))
    app = App()
    for name, engine in engines.by_name().items():   # llm, judge (the same LLM), embedder,
        app.add_engine(name, engine)                 # index, keyword, reranker

Each engine is one of ``ayo.engines`` and implements its protocol itself; the indexes are the
store-backed :class:`~ayo.engines.collection_index.CollectionIndex` and
:class:`~ayo.engines.collection_index.CollectionKeywordIndex` over the data directory's
:class:`~ayo.engines.retrieval.RetrievalStore`. :func:`placed` applies a placement (Ray) to
the result. Heavy modules (torch, transformers, faiss) load only when an engine is built.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ayo.cluster import Placement
    from ayo.engines import Embedder, RetrievalStore
    from ayo.engines.collection_index import CollectionIndex, CollectionKeywordIndex
    from ayo.engines.llm import LLMEngine
    from ayo.engines.reranker import Reranker

DEFAULT_LLM = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"
# The default engines' shared resources (``EngineSet.resources()`` of what ``by_name`` registers):
# the judge computes on the LLM. Plans compiled for the default engines, as ``python -m ayo plan``
# prints them, use it; the passes then see judge and LLM work as one resource's.
DEFAULT_RESOURCES: Mapping[str, str] = {"judge": "llm"}


@dataclass(frozen=True)
class EngineOptions:
    """What the default engines are built from.

    Attributes:
        model: the LLM: an embedded id, a Hugging Face folder or a .gguf file.
        dtype: the LLM's activations: ``float32`` (with fp32 weights token for token equal to
            transformers), ``bfloat16`` or ``auto``; None (the default): float32, or the
            activations ``weights`` run with (``EngineConfig``).
        weights: the LLM's matmul weights: ``auto`` (fp32 here; with dtype ``auto`` the
            format measured fastest on this CPU), ``fp32``, ``bf16``, ``int8``, ``int4``
            (``engines/llm/quant.py``).
        embedder: the embedder: an embedded id or a sentence-transformers folder.
        reranker: ``"embedding"`` (cosine of the question and each candidate under the
            retrieval embedder: one consistent score for hits of several queries), ``"bm25"``
            (BM25 of the question over the candidates, fused by rank with the retrieval's
            order) or a cross-encoder folder. On ``benchmarks.quality``'s questions the
            embedding reranker kept the gold article in advanced_rag's top 3 as often as the
            question's own dense search (74/76); BM25 fused in lost it more often (63-66/76).
        data_dir: the RetrievalStore folder (None: ``$AYO_DATA_DIR``, else
            ``$XDG_CACHE_HOME/ayo`` or ``~/.cache/ayo``, as ``python -m ayo ingest``).
        collection: the stored collection the apps search when a query brings no documents.
        llm_threads, embedder_threads: torch threads of each engine's worker (a CPU shares
            its cores between the engines; None: torch's default).
        max_new_tokens: a cap on every decode (``EngineConfig.max_new_tokens``).
        llm_config: further :class:`~ayo.engines.llm.EngineConfig` fields.
    """

    model: str = DEFAULT_LLM
    dtype: str | None = None
    weights: str = "auto"
    embedder: str = DEFAULT_EMBEDDER
    reranker: str = "embedding"
    data_dir: str | Path | None = None
    collection: str = "wiki"
    llm_threads: int | None = None
    embedder_threads: int | None = None
    max_new_tokens: int | None = None
    llm_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def data_path(self) -> Path:
        if self.data_dir is not None:
            return Path(self.data_dir).expanduser()
        from ayo.runtime.corpus import default_data_dir

        return default_data_dir()

    def llm_kwargs(self) -> dict[str, Any]:
        """The LLM's ``EngineConfig`` fields."""
        return {
            "dtype": self.dtype,
            "weights": self.weights,
            "num_threads": self.llm_threads,
            "max_new_tokens": self.max_new_tokens,
            **self.llm_config,
        }


@dataclass
class DefaultEngines:
    """The embedded engines and the store the indexes read."""

    llm: LLMEngine
    embedder: Embedder
    reranker: Reranker
    index: CollectionIndex
    keyword: CollectionKeywordIndex
    store: RetrievalStore
    options: EngineOptions

    def by_name(self) -> dict[str, Any]:
        """The engines under the names the built-in apps use (the judge shares the LLM)."""
        return {
            "llm": self.llm,
            "judge": self.llm,
            "embedder": self.embedder,
            "index": self.index,
            "keyword": self.keyword,
            "reranker": self.reranker,
        }

    def close(self) -> None:
        """Persist the index and release the store and the embedder (the App stops the others)."""
        self.store.close()
        self.embedder.close()


def default_llm(model: str = DEFAULT_LLM, **config: Any) -> LLMEngine:
    """The LLM engine alone (``config``: ``EngineConfig`` fields); a factory a remote node can
    call: ``functools.partial(default_llm, dtype="float32")``."""
    from ayo.engines.llm import LLMEngine

    return LLMEngine.from_model(model, **config)


def default_tokenizer(model: str = DEFAULT_LLM) -> Any:
    """The LLM's tokenizer as plans use it, without loading the LLM: plans compiled with it are
    the ones the default engines run (prompt sizes price the prefill split)."""
    from ayo.engines.llm.loader import model_tokenizer
    from ayo.engines.llm.tokenizer import ChatTokenizer

    return ChatTokenizer(model_tokenizer(model))


def default_embedder(model: str = DEFAULT_EMBEDDER, threads: int | None = None) -> Embedder:
    """The embedder alone (a factory for a remote node too)."""
    from ayo.engines import BatchConfig, Embedder

    return Embedder.from_model(model, batch=BatchConfig(num_threads=threads))


def default_reranker(
    embedder: str = DEFAULT_EMBEDDER, kind: str = "embedding", threads: int | None = None
) -> Reranker:
    """The reranker alone: the embedding reranker loads its own ``embedder`` (a factory for a
    remote node; in one process the reranker shares the engines' embedder)."""
    from ayo.engines.reranker import Reranker

    return Reranker.of_kind(
        kind, default_embedder(embedder, threads) if kind == "embedding" else None
    )


def load_default_engines(options: EngineOptions | None = None) -> DefaultEngines:
    """Build the default engines (blocking: loads models, seconds) and open the store.

    Raises:
        RuntimeError: a model or package is missing (the message names it and the fix).
    """
    options = options or EngineOptions()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from ayo.engines import RetrievalStore
        from ayo.engines.collection_index import CollectionIndex, CollectionKeywordIndex
        from ayo.engines.llm import LLMEngine  # noqa: F401  (fail here, before any model loads)
        from ayo.engines.reranker import Reranker
    except ImportError as exc:
        raise RuntimeError(f"the embedded engines need their packages: {exc}") from exc
    try:
        embedder = default_embedder(options.embedder, options.embedder_threads)
        llm = default_llm(options.model, **options.llm_kwargs())
    except Exception as exc:  # ModelNotFound, a broken file: say which
        raise RuntimeError(f"could not load a model: {exc}") from exc
    path = options.data_path
    path.mkdir(parents=True, exist_ok=True)
    store = RetrievalStore(path, embedder)
    return DefaultEngines(
        llm=llm,
        embedder=embedder,
        reranker=Reranker.of_kind(options.reranker, embedder),
        index=CollectionIndex(store, options.collection),
        keyword=CollectionKeywordIndex(store, options.collection),
        store=store,
        options=options,
    )


PLACEABLE = ("llm", "embedder", "reranker")


def placed(
    engines: DefaultEngines, placements: Mapping[str, Placement | Sequence[Placement]]
) -> dict[str, list[Any]]:
    """The default engines' instances where ``placements`` put them (by engine name: ``llm``,
    which the judge shares, ``embedder``, ``reranker``): the loaded local engine for
    ``Placement.LOCAL``, a :class:`~ayo.cluster.remote.RemoteEngine` building the same engine (same
    model options) on a Ray node for the others. Engines without a placement stay local."""
    from ayo.cluster import place

    options = engines.options
    factories = {
        "llm": functools.partial(default_llm, options.model, **options.llm_kwargs()),
        "embedder": functools.partial(default_embedder, options.embedder),
        "reranker": functools.partial(default_reranker, options.embedder, options.reranker),
    }
    local = engines.by_name()
    out = {name: [engine] for name, engine in local.items()}
    for name, where in placements.items():
        if name not in PLACEABLE:
            raise ValueError(f"engine {name!r} cannot be placed; placeable: {PLACEABLE}")
        out[name] = place(name, factories[name], where, name, local=local[name])
    out["judge"] = out["llm"]  # the judge shares the LLM, wherever it runs
    return out
