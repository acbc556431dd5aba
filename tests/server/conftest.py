"""Fixtures: one real server for the whole session, on the embedded default engines.

The server runs in a background thread with its own event loop (like a real process: the tests'
per-function loops talk to it over TCP on 127.0.0.1). Models load once (~12 s); the data dir is
a temp folder holding the first ``CORPUS_LIMIT`` wiki documents in collection ``wiki``.

Fixtures:
    server_url      "http://127.0.0.1:PORT", no API key
    server          RunningServer (url, state, call(coro) on the server loop, headers)
    keyed_server    RunningServer of a second site over the same engines, API key ``API_KEY``
    api_key         that key

Besides the built-in apps, the state has ``short_rag`` (question -> top-3 search of ``wiki`` ->
an answer of at most ``SHORT_TOKENS`` tokens; outputs ``answer`` and ``docs``): use it to keep
generation short; and ``long_answer`` (question -> 64 tokens, no retrieval, a short prompt).
Request bodies are limited to 1 MiB. Concurrency limit: ``MAX_QUERIES`` queries (app queries and OpenAI requests alike) and
``MAX_QUEUED`` waiting for a slot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

CORPUS_LIMIT = 24
MAX_QUERIES = 3
MAX_QUEUED = 1  # queries that may wait for a slot (the server's default is generous: 1024)
SHORT_TOKENS = 8
API_KEY = "test-key-123"


def short_rag() -> Any:
    """naive_rag with an 8-token answer that also outputs the retrieved docs."""
    from ayo.apps import AppTemplate
    from ayo.apps.rag import ANSWER
    from ayo.scheduler import PortType
    from ayo.workflow import TEMP, Indexing, InputShape, Search, Synthesis, WorkflowBuilder

    def build(shape: InputShape) -> Any:
        wf = WorkflowBuilder("short_rag")
        question = wf.input("question")
        collection: Any = "default"
        if shape.has("documents"):
            docs = wf.input("documents", PortType.TEXT_LIST)
            collection = wf.add(Indexing("indexing", documents=docs, collection=TEMP))["collection"]
        hits = wf.add(Search("retrieval", query=question, k=3, collection=collection))
        bind = {"question": question, "context": hits["docs"]}
        answer = wf.add(Synthesis("synthesis", ANSWER, bind, max_tokens=SHORT_TOKENS))
        wf.output("answer", answer["answer"])
        wf.output("docs", hits["docs"])
        return wf.build()

    return AppTemplate(
        "short_rag", "test app: top-3 search, 8-token answer", ("question",), ("documents",), build
    )


def long_answer() -> Any:
    """question -> a 64-token answer, no retrieval (a short prompt: cheap to keep in flight)."""
    from ayo.scheduler import Prompt
    from ayo.workflow import Synthesis, WorkflowBuilder

    wf = WorkflowBuilder("long_answer")
    question = wf.input("question")
    prompt = Prompt("Write a long essay about {question}.\n")
    answer = wf.add(Synthesis("synthesis", prompt, {"question": question}, max_tokens=64))
    wf.output("answer", answer["answer"])
    return wf.build()


@dataclass
class RunningServer:
    url: str
    state: Any  # ayo.server.state.ServerState
    loop: asyncio.AbstractEventLoop
    api_key: str | None = None

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        """Run ``coro`` on the server's loop (engine state lives there) and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


class _ServerThread:
    """An event loop in a thread running the state and two sites (without and with a key)."""

    def __init__(self, data_dir: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="test-server", daemon=True
        )
        self.thread.start()
        self.data_dir = data_dir
        self.runners: list[Any] = []
        self.servers = self._call(self._start(), timeout=300)

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> tuple[RunningServer, RunningServer]:
        from ayo.server.app import create_app
        from ayo.server.config import ServerConfig
        from ayo.server.lifecycle import build_state, ensure_corpus
        from ayo.server.serve import start_site

        config = ServerConfig(
            port=0,
            data_dir=self.data_dir,
            # the tests compare answers with the engine's own generate: float32 gives the same
            # tokens whatever the batch and the prefix cache (bfloat16, auto's pick on AMX
            # CPUs, rounds differently in a cached or batched prefill and may diverge)
            dtype="float32",
            corpus="wiki",
            corpus_limit=CORPUS_LIMIT,
            max_concurrent_queries=MAX_QUERIES,
            max_queued_queries=MAX_QUEUED,
            query_timeout_s=120,
            max_body_mb=1,
            max_document_mb=0.5,
        )
        self.state = await build_state(config)
        self.state.app.add_workflow(short_rag())
        self.state.app.add_workflow(long_answer())
        await ensure_corpus(self.state, progress=False)
        keyed = dataclasses.replace(self.state, config=dataclasses.replace(config, api_key=API_KEY))
        out = []
        for state, key in ((self.state, None), (keyed, API_KEY)):
            runner, port = await start_site(create_app(state), "127.0.0.1", 0)
            self.runners.append(runner)
            out.append(RunningServer(f"http://127.0.0.1:{port}", state, self.loop, key))
        return out[0], out[1]

    async def _stop(self) -> None:
        from ayo.server.lifecycle import close_state

        for runner in self.runners:
            await runner.cleanup()
        await close_state(self.state)

    def close(self) -> None:
        try:
            self._call(self._stop(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture(scope="session")
def _server_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ServerThread]:
    server = _ServerThread(str(tmp_path_factory.mktemp("ayo-data")))
    yield server
    server.close()


@pytest.fixture(scope="session")
def server(_server_thread: _ServerThread) -> RunningServer:
    return _server_thread.servers[0]


@pytest.fixture(scope="session")
def server_url(server: RunningServer) -> str:
    return server.url


@pytest.fixture(scope="session")
def keyed_server(_server_thread: _ServerThread) -> RunningServer:
    return _server_thread.servers[1]


@pytest.fixture(scope="session")
def api_key() -> str:
    return API_KEY
