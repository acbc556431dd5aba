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
from typing import TYPE_CHECKING

from ayo.server.config import ServerConfig
from ayo.server.state import ServerState

if TYPE_CHECKING:
    from ayo.runtime.defaults import DefaultEngines, EngineOptions

log = logging.getLogger(__name__)


def _model_id(name: str, default: str) -> str:
    """The id clients use: the embedded name, or a path's file/folder name."""
    if name.lower() == default:
        return default
    base = os.path.basename(os.path.normpath(name))
    return base.removesuffix(".gguf") or name


def engine_options(config: ServerConfig) -> EngineOptions:
    """The default engines the server runs (``ayo.runtime.defaults``), from its config."""
    from ayo.runtime.defaults import EngineOptions

    return EngineOptions(
        model=config.model,
        dtype=config.dtype,
        weights=config.weights,
        embedder=config.embedder,
        data_dir=config.data_path,
        collection=config.collection,
    )


def make_state(config: ServerConfig, engines: DefaultEngines) -> ServerState:
    """The runtime over already loaded engines (the apps search ``config.collection``), with
    ``config.placement`` applied (remote instances are built on their nodes when the App
    starts)."""
    from ayo.engines.llm.loader import resolve_model_path
    from ayo.runtime.app import App
    from ayo.runtime.defaults import DEFAULT_EMBEDDER, DEFAULT_LLM, placed
    from ayo.runtime.profiling import engine_profile_path, stored_profiles

    llm, embedder = engines.llm, engines.embedder
    profiles = stored_profiles(engine_profile_path(config.data_path, config.model, llm))
    if not profiles and config.profile_engines:
        log.info("the engines are measured once the corpus is in (first start on this machine)")
    app = App(
        max_queries=config.max_concurrent_queries,
        max_waiting=config.max_queued_queries,
        profiles=profiles,
    )
    for name, instances in placed(engines, config.placements()).items():
        app.add_engine(name, instances)
    loaded = {
        "llm": {
            "id": _model_id(config.model, DEFAULT_LLM),
            "path": str(resolve_model_path(config.model)),
            "dtype": llm.config.dtype,
            "weights": llm.config.weights,
            "weights_reason": llm.config.format_reason or "as configured",
            "max_model_len": llm.max_model_len,
        },
        "embedder": {
            "id": _model_id(config.embedder, DEFAULT_EMBEDDER),
            "path": str(embedder.model_path),
            "dim": embedder.dim,
        },
        "data_dir": str(config.data_path),
    }
    # Ingest embeds yield the shared cores to requests in flight (engines/base.py bounds the wait)
    embedder.background_gate = lambda: app.in_flight == 0
    return ServerState(
        app=app,
        engines=engines,
        config=config,
        llm_id=loaded["llm"]["id"],
        embedder_id=loaded["embedder"]["id"],
        loaded=loaded,
    )


async def build_state(config: ServerConfig) -> ServerState:
    """Load everything in a thread (the loop stays live), join the Ray cluster if the placement
    asks for one, build the runtime and start it (a remote engine loads on its node)."""
    from ayo.runtime.defaults import load_default_engines

    engines = await asyncio.to_thread(load_default_engines, engine_options(config))
    if config.remote_placed:
        from ayo.cluster import connect

        connect(config.ray_address)
        log.info("joined the Ray cluster at %s; placement %s", config.ray_address,
                 {k: [p.to_json() for p in v] for k, v in config.placements().items()})  # fmt: skip
    state = make_state(config, engines)
    await state.app.start()
    llm = engines.llm
    log.info(
        "loaded LLM %s (%s activations, %s weights: %s; context %d tokens) from %s",
        state.llm_id,
        llm.config.dtype,
        llm.config.weights,
        llm.config.format_reason or "as configured",
        llm.max_model_len,
        state.loaded["llm"]["path"],
    )
    log.info(
        "loaded embedder %s (dim %d) from %s",
        state.embedder_id,
        engines.embedder.dim,
        state.loaded["embedder"]["path"],
    )
    log.info("data directory: %s", config.data_path)
    log.info("imports: %s", import_origins())
    return state


async def ensure_engine_profiles(state: ServerState) -> None:
    """The first start on this machine (no stored profile for its CPU, model, dtype and thread
    count) measures the engines and stores their profile; the plans use it from now on."""
    from ayo.runtime.profiling import engine_profile_path, ensure_profiles

    config, app = state.config, state.app
    path = engine_profile_path(config.data_path, config.model, state.llm)
    if not path.exists():  # else make_state loaded it
        await ensure_profiles(app, path, app.engines.instances("embedder")[0])


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

    from ayo.runtime.corpus import iter_documents

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
            from ayo.cluster import disconnect

            disconnect()  # leaves the cluster; its nodes keep running
        await asyncio.to_thread(state.engines.close)
        log.info("closed the engines; the data directory %s is flushed", state.config.data_path)
