"""Building the server's engines, ingesting the corpus, closing everything.

state = await build_state(config)        # loads models (seconds), opens the data dir
await ensure_corpus(state)               # embeds only corpus documents not yet stored
await ensure_engine_profiles(state)      # first start on this machine: measures the engines
...
await close_state(state)                 # stops the runtime, engines, persists the index
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

from ayo.server.config import ServerConfig
from ayo.server.state import Admission, ServerState

log = logging.getLogger(__name__)

DEFAULT_LLM_ID = "smollm2-135m-instruct"
DEFAULT_EMBEDDER_ID = "all-minilm-l6-v2"


def _model_id(name: str, default: str) -> str:
    """The id clients use: the embedded name, or a path's file/folder name."""
    if name.lower() == default:
        return default
    base = os.path.basename(os.path.normpath(name))
    return base.removesuffix(".gguf") or name


def build_engines(config: ServerConfig, **llm_options: Any) -> tuple[Any, Any, Any]:
    """Load the LLM and the embedder and open the RetrievalStore (blocking, seconds).

    Raises:
        RuntimeError: a model or package is missing (the message names it and the fix).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ayo.engines import Embedder, RetrievalStore
    from ayo.engines.llm import LLMEngine

    try:
        embedder = Embedder.from_model(config.embedder)
        llm = LLMEngine.from_model(config.model, **{"dtype": config.dtype, **llm_options})
    except Exception as exc:  # ModelNotFound, a broken file: say which and stop
        raise RuntimeError(f"could not load a model: {exc}") from exc
    config.data_path.mkdir(parents=True, exist_ok=True)
    store = RetrievalStore(config.data_path, embedder)
    return llm, embedder, store


def make_state(config: ServerConfig, llm: Any, embedder: Any, store: Any) -> ServerState:
    """The runtime over already loaded engines (the apps search ``config.collection``)."""
    from ayo.adapters import (
        EmbedderAdapter,
        LLMAdapter,
        RerankerAdapter,
        StoreIndex,
        StoreKeywordIndex,
    )
    from ayo.app import App
    from ayo.engines import Reranker
    from ayo.profiling import engine_profile_path, stored_profiles

    profiles = stored_profiles(engine_profile_path(config.data_path, config.model, llm))
    if not profiles and config.profile_engines:
        log.info("the engines are measured once the corpus is in (first start on this machine)")
    app = App(max_queries=config.max_concurrent_queries, profiles=profiles)
    llm_adapter = LLMAdapter(llm)
    engines = {
        "llm": llm_adapter,
        "judge": llm_adapter,
        "embedder": EmbedderAdapter(embedder),
        "index": StoreIndex(store, config.collection),
        "keyword": StoreKeywordIndex(store, config.collection),
        "reranker": RerankerAdapter(Reranker.from_model(embedder=embedder)),
    }
    for name, instances in placed_engines(config, engines).items():
        engines[name] = instances
    engines["judge"] = engines["llm"]  # the judge shares the LLM, wherever it runs
    for name, engine in engines.items():
        app.add_engine(name, engine)
    from ayo.engines.llm.loader import resolve_model_path

    loaded = {
        "llm": {
            "id": _model_id(config.model, DEFAULT_LLM_ID),
            "path": str(resolve_model_path(config.model)),
            "dtype": llm.config.dtype,
            "max_model_len": llm.max_model_len,
        },
        "embedder": {
            "id": _model_id(config.embedder, DEFAULT_EMBEDDER_ID),
            "path": str(getattr(embedder, "model_path", config.embedder)),
            "dim": embedder.dim,
        },
        "data_dir": str(config.data_path),
    }
    admission = Admission(config.max_concurrent_queries)
    # Ingest embeds yield the shared cores to requests in flight (engines/base.py bounds the wait)
    embedder.background_gate = lambda: app.in_flight == 0 and admission.in_flight == 0
    return ServerState(
        app=app,
        llm=llm,
        embedder=embedder,
        store=store,
        config=config,
        llm_id=loaded["llm"]["id"],
        embedder_id=loaded["embedder"]["id"],
        admission=admission,
        loaded=loaded,
    )


def placed_engines(config: ServerConfig, local: dict[str, Any]) -> dict[str, list[Any]]:
    """The instances ``config.placement`` asks for, by engine name: the already loaded local
    engine for ``"local"``, a :class:`~ayo.remote.RemoteEngine` for a Ray node (built there
    by the same model options as the local one)."""
    import functools

    from ayo.adapters import default_embedder, default_llm, default_reranker
    from ayo.cluster import place

    factories = {
        "llm": functools.partial(default_llm, config.model, dtype=config.dtype),
        "embedder": functools.partial(default_embedder, model=config.embedder),
        "reranker": functools.partial(default_reranker, embedder=config.embedder),
    }
    out = {}
    for name, placements in config.placements().items():
        out[name] = place(name, factories[name], placements, name, local=local[name])
    return out


async def build_state(config: ServerConfig, **llm_options: Any) -> ServerState:
    """Load everything in a thread (the loop stays live), join the Ray cluster if the placement
    asks for one, build the runtime and start it (a remote engine loads on its node)."""
    llm, embedder, store = await asyncio.to_thread(build_engines, config, **llm_options)
    if config.remote_placed:
        from ayo.cluster import connect

        connect(config.ray_address)
        log.info("joined the Ray cluster at %s; placement %s", config.ray_address,
                 {k: [p.to_json() for p in v] for k, v in config.placements().items()})  # fmt: skip
    state = make_state(config, llm, embedder, store)
    await state.app.start()
    log.info(
        "loaded LLM %s (%s%s, context %d tokens) from %s",
        state.llm_id,
        llm.config.dtype,
        dtype_reason(config.dtype),
        llm.max_model_len,
        state.loaded["llm"]["path"],
    )
    log.info(
        "loaded embedder %s (dim %d) from %s",
        state.embedder_id,
        embedder.dim,
        state.loaded["embedder"]["path"],
    )
    log.info("data directory: %s", config.data_path)
    log.info("imports: %s", import_origins())
    return state


async def ensure_engine_profiles(state: ServerState) -> None:
    """The first start on this machine (no stored profile for its CPU, model, dtype and thread
    count) measures the engines and stores their profile; the plans use it from now on."""
    from ayo.profiling import engine_profile_path, ensure_profiles

    config, app = state.config, state.app
    path = engine_profile_path(config.data_path, config.model, state.llm)
    if not path.exists():  # else make_state loaded it
        await ensure_profiles(app, path, app.engines.instances("embedder")[0])


def dtype_reason(asked: str) -> str:
    """Why ``--dtype auto`` chose what it did, for the start-up log."""
    if asked != "auto":
        return ""
    from ayo.engines.llm.config import amx_bf16

    return ": auto, the CPU has AMX bf16" if amx_bf16() else ": auto, the CPU lacks AMX bf16"


def import_origins() -> str:
    """Where ``ayo`` and Hugging Face's ``kernels`` (which transformers loads) were imported
    from: the check that no working directory made our ``kernels/`` folder shadow it."""
    import transformers

    import ayo
    import kernels

    return (
        f"ayo {ayo.__version__} from {Path(ayo.__file__).parent}, transformers "
        f"{transformers.__version__}, kernels from {Path(kernels.__file__).parent}"
    )


async def ensure_corpus(
    state: ServerState,
    progress: bool = True,
    stop: asyncio.Event | None = None,
    batch_size: int = 256,
) -> int:
    """Ingest ``config.corpus`` into ``config.collection``, embedding only the documents not yet
    stored (a finished corpus costs one key lookup; an interrupted one resumes). Batches are
    durable once acknowledged; ``stop`` set ends the ingest after the current batch. Returns how
    many documents were embedded. The collection exists afterwards even with ``--corpus none``
    (empty: documents can be added over HTTP)."""
    from tqdm import tqdm

    from ayo.ingest import iter_documents

    config, store = state.config, state.store
    store.create_collection(config.collection)
    if config.corpus == "none":
        log.info("no corpus (--corpus none); collection %r is searched", config.collection)
        return 0
    documents = list(iter_documents(config.corpus))[: config.corpus_limit]
    keys = [d.id for d in documents]
    existing = await asyncio.to_thread(store.store.existing_keys, config.collection, keys)
    missing = [d for d in documents if d.id not in existing]
    log.info(
        "corpus %s -> collection %r: %d documents, %d already stored, %d to embed",
        config.corpus,
        config.collection,
        len(documents),
        len(documents) - len(missing),
        len(missing),
    )
    start, done, chunks = time.perf_counter(), 0, 0
    with tqdm(total=len(missing), unit="doc", desc=config.collection, disable=not progress) as bar:
        for i in range(0, len(missing), batch_size):
            if stop is not None and stop.is_set():
                log.info("ingest stopped after %d documents; the next start resumes", done)
                break
            ack = await store.ingest(config.collection, missing[i : i + batch_size], "skip")
            done, chunks = done + ack.documents, chunks + ack.chunks
            bar.update(ack.documents + len(ack.skipped))
    if missing:
        await asyncio.to_thread(store.vectors.save)
        seconds = time.perf_counter() - start
        log.info(
            "ingested %d documents (%d chunks) in %.1f s (%.0f docs/s)",
            done,
            chunks,
            seconds,
            done / max(seconds, 1e-9),
        )
    state.embedded_at_startup = done
    log.info("%d documents embedded at startup", done)
    return done


async def close_state(state: ServerState) -> None:
    """Stop the runtime and the engines, persist the vector index (idempotent enough to call
    from a signal handler's shutdown path)."""
    try:
        await state.app.close()
    finally:
        if state.config.remote_placed:
            from ayo.remote import _ray

            _ray().shutdown()  # leaves the cluster; its nodes keep running
        await asyncio.to_thread(state.store.close)
        await asyncio.to_thread(state.embedder.close)
        log.info("closed the engines; the data directory %s is flushed", state.config.data_path)
