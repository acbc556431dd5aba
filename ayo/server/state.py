"""What every handler shares: the runtime, the raw engines, the store, the config.

Handlers get it as ``request.app[STATE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ayo.server.config import ServerConfig
from ayo.server.errors import ApiError


class Admission:
    """A count of requests in flight with a hard limit: beyond it, 429 at once (no queueing
    inside the server, so a client never hangs on a full server)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.in_flight = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot for the block; raises ``ApiError(429)`` when all are taken."""
        if self.in_flight >= self.limit:
            raise ApiError(
                429,
                "rate_limit_error",
                f"the server is at its limit of {self.limit} concurrent requests; retry later",
            )
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


@dataclass
class ServerState:
    """The server's engines and settings.

    Attributes:
        app: the runtime (``ayo.App``) with the engines registered under the apps' names.
        llm: the raw ``ayo.engines.llm.LLMEngine`` (OpenAI endpoints), or None.
        llm_id: the model id clients name (``smollm2-135m-instruct``).
        embedder: the raw ``ayo.engines.Embedder``, or None.
        embedder_id: its model id (``all-minilm-l6-v2``).
        store: the ``RetrievalStore`` of the data directory.
        config: the server config.
        admission: limit on raw engine requests in flight (OpenAI endpoints); app queries are
            limited by ``App(max_queries=...)``.
        ingest_lock: ingests run one at a time (a duplicate-id check and its write stay atomic).
        ingests: the ingest tasks running (shielded from their clients; shutdown cancels them).
        handlers: the tasks serving requests now (shutdown waits for them, then cancels them).
        embedded_at_startup: corpus documents embedded while starting (0 on a warm restart).
        loaded: what was loaded, for logs and ``/health`` (model ids, dtype, paths).
        instances: every engine instance and its state at the last ``/health`` or
            ``/metrics`` (``EngineSet.health``).
    """

    app: Any
    llm: Any
    embedder: Any
    store: Any
    config: ServerConfig
    llm_id: str = "smollm2-135m-instruct"
    embedder_id: str = "all-minilm-l6-v2"
    admission: Admission = field(default_factory=lambda: Admission(64))
    ingest_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ingests: set[asyncio.Task] = field(default_factory=set)
    handlers: set[asyncio.Task] = field(default_factory=set)
    embedded_at_startup: int = 0
    loaded: dict[str, Any] = field(default_factory=dict)
    instances: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    @property
    def app_names(self) -> list[str]:
        return self.app.workflows

    @property
    def model_ids(self) -> list[str]:
        """Every id ``/v1/models`` lists: the LLM, the embedder, ``app:NAME`` per app."""
        ids = [i for i, e in ((self.llm_id, self.llm), (self.embedder_id, self.embedder)) if e]
        return ids + [f"app:{name}" for name in self.app_names]


STATE = web.AppKey("ayo_state", ServerState)
