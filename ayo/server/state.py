"""What every handler shares: the runtime, its engines, the store, the config.

Handlers get it as ``request.app[STATE]``. Every request that computes goes through the runtime
(``app``): app queries, OpenAI completions and embeddings alike hold one of its query slots and
reach the engines through its schedulers. The engines themselves (``engines``) are read for
what is not compute: the LLM's tokenizer and chat template, the embedder's dimension, the store
for ingest and collection listings.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ayo.server.config import ServerConfig


@dataclass
class ServerState:
    """The server's engines and settings.

    Attributes:
        app: the runtime (``ayo.App``) with the engines registered under the apps' names.
        engines: the default engines (``ayo.runtime.defaults.DefaultEngines``): ``llm``, ``embedder``,
            ``store`` (the ``RetrievalStore`` of the data directory), ...
        config: the server config.
        llm_id: the model id clients name (``smollm2-135m-instruct``).
        embedder_id: its model id (``all-minilm-l6-v2``).
        ingest_lock: ingests run one at a time (a duplicate-id check and its write stay atomic).
        ingests: the ingest tasks running (shielded from their clients; shutdown cancels them).
        handlers: the tasks serving requests now (shutdown waits for them, then cancels them).
        embedded_at_startup: corpus documents embedded while starting (0 on a warm restart).
        loaded: what was loaded, for logs and ``/health`` (model ids, dtype, paths).
        instances: every engine instance and its state at the last ``/health`` or
            ``/metrics`` (``EngineSet.health``).
    """

    app: Any
    engines: Any
    config: ServerConfig
    llm_id: str = "smollm2-135m-instruct"
    embedder_id: str = "all-minilm-l6-v2"
    ingest_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ingests: set[asyncio.Task] = field(default_factory=set)
    handlers: set[asyncio.Task] = field(default_factory=set)
    embedded_at_startup: int = 0
    loaded: dict[str, Any] = field(default_factory=dict)
    instances: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    @property
    def llm(self) -> Any:
        """The local ``LLMEngine`` (its tokenizer and chat template)."""
        return self.engines.llm

    @property
    def embedder(self) -> Any:
        """The local ``Embedder`` (its dimension and tokenizer)."""
        return self.engines.embedder

    @property
    def store(self) -> Any:
        return self.engines.store

    @property
    def app_names(self) -> list[str]:
        return self.app.workflows

    @property
    def model_ids(self) -> list[str]:
        """Every id ``/v1/models`` lists: the LLM, the embedder, ``app:NAME`` per app."""
        return [self.llm_id, self.embedder_id] + [f"app:{name}" for name in self.app_names]


STATE = web.AppKey("ayo_state", ServerState)
